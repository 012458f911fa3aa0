// Package sqsenv gives tests an SQS endpoint: INBOX_SQS_ENDPOINT when set
// (a real SQS, or an emulator elsewhere, with the AWS_* credentials and
// region of the environment), else the goaws emulator
// (github.com/Admiral-Piett/goaws) served in this process. Apart from
// testenv, so that only the tests that need SQS link the emulator; no
// package that users import imports this one.
//
// goaws keeps its queues in global state, so the tests of one process
// share one emulator: each test takes queues of its own (Queue). Its
// gaps, which tests work around rather than the adapter:
//   - ApproximateReceiveCount stays 1 on every receive;
//   - SendMessageBatch enqueues but reports no entries;
//   - a FIFO group is not held while one of its messages is in flight,
//     and a received message does not carry its MessageGroupId;
//   - a queue created without VisibilityTimeout gets 0 (CreateQueue
//     always sets it);
//   - its errors are not SQS's types (match smithy.APIError.ErrorCode());
//   - it reads its map of queues without a lock at the start of a request,
//     a data race (go test -race) with a queue created or deleted at the
//     same time: Precreate makes the queues before any traffic, and a test
//     that deletes a queue must not run alongside others.
package sqsenv

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/sirupsen/logrus"

	"github.com/inboxkit/inbox/internal/testenv"
)

// VisibilityTimeout is the queues' own visibility timeout; the Source
// asks for its own on every receive.
const VisibilityTimeout = 30 * time.Second

var (
	startOnce sync.Once
	emulated  string // the emulator's URL, once started

	poolMu sync.Mutex
	pool   = map[bool][]string{} // fifo -> precreated queue names
)

// Emulated reports whether the tests run on the in-process emulator.
func Emulated() bool { return os.Getenv("INBOX_SQS_ENDPOINT") == "" }

// Endpoint returns INBOX_SQS_ENDPOINT, or the URL of the in-process
// emulator, which it starts on first use.
func Endpoint() string {
	if e := os.Getenv("INBOX_SQS_ENDPOINT"); e != "" {
		return e
	}
	startOnce.Do(start)
	return emulated
}

// start serves goaws on a loopback port, with its periodic task (which
// makes messages visible again when their visibility timeout ends) every
// 100 ms.
func start() {
	logrus.SetOutput(io.Discard) // an INFO line per message, a WARN per empty poll
	srv := httptest.NewServer(router.New())
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	models.CurrentEnvironment.Host = host
	models.CurrentEnvironment.Port = port
	models.CurrentEnvironment.Region = "" // queue URLs on host:port itself
	models.CurrentEnvironment.AccountID = "100010001000"
	models.CurrentEnvironment.EnableDuplicates = true // FIFO deduplication, as SQS does
	go gosqs.PeriodicTasks(100*time.Millisecond, make(chan bool))
	emulated = srv.URL
}

// Intercepted returns the URL of a server, closed when tb ends, that
// hands each request to intercept first, and to the emulator unless
// intercept answered it (returned true; intercept may read r's body, and
// must then put it back): fault injection, on the emulator
// only (tb skips on a real endpoint). action is the request's SQS action
// ("ReceiveMessage").
func Intercepted(tb testing.TB, intercept func(w http.ResponseWriter, r *http.Request, action string) bool) string {
	tb.Helper()
	if !Emulated() {
		tb.Skip("fault injection needs the in-process emulator; INBOX_SQS_ENDPOINT is set")
	}
	Endpoint()
	emu := router.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action := r.Header.Get("X-Amz-Target")
		action = action[strings.LastIndexByte(action, '.')+1:]
		if !intercept(w, r, action) {
			emu.ServeHTTP(w, r)
		}
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// WriteError answers a request with SQS's error code (as its JSON
// protocol sends one, with the query protocol's code alongside) and
// HTTP status.
func WriteError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("x-amzn-query-error", code+";Sender")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"__type":"com.amazonaws.sqs#%s","message":"injected by a test"}`, code)
}

// Client returns a client of Endpoint. Its credentials and region are the
// environment's AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
// and AWS_REGION, or dummies, which the emulator does not check.
func Client() *sqs.Client {
	return ClientOn(Endpoint())
}

// ClientOn returns a client of endpoint, with Client's credentials.
func ClientOn(endpoint string) *sqs.Client {
	creds := aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}
	if k := os.Getenv("AWS_ACCESS_KEY_ID"); k != "" {
		creds = aws.Credentials{AccessKeyID: k, SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: os.Getenv("AWS_SESSION_TOKEN")}
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	return sqs.New(sqs.Options{
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil }),
	})
}

// CreateQueue creates the queue name (a FIFO queue when it ends in
// ".fifo") with VisibilityTimeout, and returns its URL.
func CreateQueue(ctx context.Context, cl *sqs.Client, name string) (string, error) {
	// SQS's default retention, 4 days, given explicitly: goaws reports 0
	// for a queue created without it.
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(VisibilityTimeout / time.Second)),
		"MessageRetentionPeriod": "345600"}
	if len(name) > 5 && name[len(name)-5:] == ".fifo" {
		attrs["FifoQueue"] = "true"
	}
	out, err := cl.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("create queue %s at %s: %w", name, Endpoint(), err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// Precreate makes standard and fifo queues for Queue to hand out, before
// any traffic (see the package comment), as many for each run of the
// tests that go test's -count asks for; call it from TestMain. It does
// nothing on a real endpoint, where Queue creates queues as it goes.
func Precreate(standard, fifo int) error {
	if !Emulated() {
		return nil
	}
	runs := testCount()
	standard, fifo = standard*runs, fifo*runs
	ctx := context.Background()
	cl := Client()
	for i := range standard + fifo {
		isFIFO := i >= standard
		name := testenv.Name("inboxtest_")
		if isFIFO {
			name += ".fifo"
		}
		if _, err := CreateQueue(ctx, cl, name); err != nil {
			return err
		}
		poolMu.Lock()
		pool[isFIFO] = append(pool[isFIFO], name)
		poolMu.Unlock()
	}
	return nil
}

// testCount is the number of times go test runs each test: -count times
// the number of -cpu values (1 when unset or unparsable). TestMain runs
// once for all the runs.
func testCount() int {
	if !flag.Parsed() {
		flag.Parse()
	}
	n := 1
	if f := flag.Lookup("test.count"); f != nil {
		if c, err := strconv.Atoi(f.Value.String()); err == nil && c > 1 {
			n = c
		}
	}
	if f := flag.Lookup("test.cpu"); f != nil && f.Value.String() != "" {
		n *= len(strings.Split(f.Value.String(), ","))
	}
	return n
}

// Queue returns the name of a fresh queue, a FIFO one when fifo is set:
// one of Precreate's on the emulator, else a new one, deleted when tb
// ends. It fails tb when the emulator is out of queues.
func Queue(tb testing.TB, fifo bool) string {
	tb.Helper()
	if Emulated() {
		poolMu.Lock()
		defer poolMu.Unlock()
		names := pool[fifo]
		if len(names) == 0 {
			tb.Fatalf("sqsenv: no precreated queue left (fifo: %v): raise the numbers given to Precreate in TestMain", fifo)
		}
		pool[fifo] = names[1:]
		return names[0]
	}
	name := testenv.Name("inboxtest_")
	if fifo {
		name += ".fifo"
	}
	ctx := context.Background()
	cl := Client()
	url, err := CreateQueue(ctx, cl, name)
	if err != nil {
		testenv.Unavailable(tb, "SQS at "+Endpoint(), err)
	}
	tb.Cleanup(func() { _, _ = cl.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}) })
	return name
}
