package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/kafka"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	inboxsqs "github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/internal/redact"
	"github.com/inboxkit/inbox/internal/replay"
	"github.com/inboxkit/inbox/store"
)

var replayCommand = command{
	name: "dead-letters replay",
	synopsis: "inbox dead-letters replay " + storeSynopsis + `
    (-nats URL -subject S | -amqp URL [-exchange E] -routing-key K |
     -kafka BROKERS -topic T [-kafka-tls] [-kafka-ca FILE] [-kafka-sasl M] |
     -sqs QUEUE_URL [-sqs-endpoint URL])
    [-type-header H] [-id-header H]
    -consumer C [-scope-id-by-type] [-timeout D] [-lock-timeout D] [-json]
    (ID... | -all ` + filterSynopsis + " [-dry-run])",
	description: `Sends dead letters of one consumer back through their broker, so that
this consumer, running with its handler fixed, processes each once: it
publishes the payload, headers and type with the message's original ID
(NATS: Nats-Msg-Id; RabbitMQ: message_id, with publisher confirms;
Kafka: the -id-header header, from an idempotent producer, acked by all
in-sync replicas; SQS: the -id-header message attribute) and releases
the message's dead inbox row. The broker's own headers, such as
Nats-Rollup or x-death, are left out.

-consumer is required: a dead letter of another consumer is refused
(nothing published, nothing changed). The destination (-subject,
-exchange and -routing-key, -topic, or the queue) must reach that
consumer alone: every other consumer of it gets a copy too, and
processes it unless it holds the message's row (one that never had the
message, or whose row was pruned, processes it).

The consumer must key messages by their broker ID: a custom
ConsumerConfig.ID is not supported (the copy would be claimed under the
key that function makes of it, not the dead letter's). A consumer with
inbox.Config.ScopeIDByType stores type and ID together as the key: pass
-scope-id-by-type, and the ID and type that key holds are published (with
NATS, -type-header must be the consumer's). Without the flag, a key that
looks scoped by its dead letter's type is refused; with it, a key that is
not scoped is refused.

Each dead letter is replayed in one transaction of the database, in this
order: lock and delete the dead letter, delete the message's dead inbox
row and failed attempts, publish and wait for the broker's confirmation
(at most -timeout), COMMIT. While the dead row is there, a consumer that
receives the published copy before the COMMIT waits for the row's lock
(its lock timeout, 5 s by default, ends in a retry: hence -timeout's 4 s).
If the row was pruned, there is nothing to lock: the consumer may process
the copy before the COMMIT (a rerun then finds it processed_since). On
SQLite the transaction holds the database's write lock (BEGIN IMMEDIATE)
from its start to the COMMIT, publish included: every writer, consumers
too, waits meanwhile. The effect happens once, whatever happens:
  - killed before the COMMIT: the database rolls back; the published copy
    finds the dead row and is acked as a duplicate (or, the row pruned, is
    processed); the dead letter is still there, for the next run;
  - run twice: the second run finds no dead letter (exit status 4);
  - the message was processed since it was dead-lettered (a redelivery
    after its dead row was pruned): nothing is published and the dead
    letter is removed, as inbox.Replay does.
With -all, the dead letters replayed are those selected when the command
starts: one that the consumer dead-letters again meanwhile is left for the
next run. -all -dry-run prints them, and their count, without connecting
to the broker: nothing is published, nothing released. On a terminal,
stderr shows the progress of -all: dead letters done, the rate, the time
left (not with -json).
Each dead letter is printed as its transaction commits, and a failure does
not stop the others. When some were replayed and another failed (a locked
row, a duplicate window), the exit status is 5 (partly done): stdout lists
those replayed, stderr each failure; with -json each object holds its
status and error. A dead letter not found, the others replayed, exits 4.
NATS JetStream drops a publish whose ID it saw within the stream's
duplicate window (2 min by default) and says so: the replay then rolls
back, changes nothing, and exits 75; run it again once the window has
passed since the message was last published. RabbitMQ, Kafka and SQS
have no such window for a replay: to an SQS FIFO queue (its URL ends in
.fifo), each copy goes with a deduplication ID of its own, so that the
queue does not drop it as a copy of the original. A COMMIT
that fails after the publish leaves it unknown whether the replay
happened; either way the effect happens at most once: run the command
again.

Kafka: -kafka-tls connects over TLS, checking the brokers' certificates
against the system's roots, or against those of -kafka-ca FILE. -kafka-sasl
authenticates with SASL PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, as the user
and password in INBOX_KAFKA_USER and INBOX_KAFKA_PASSWORD.

SQS credentials and region come as the AWS CLI finds them: AWS_PROFILE,
AWS_ACCESS_KEY_ID, AWS_REGION, ~/.aws, SSO, an instance role. Without a
region, the one in the queue URL is taken.

A dead letter without its payload (the database refused it) or with an
invalid ID cannot be replayed: discard it.`,
	examples: `inbox dead-letters replay -postgres $DSN -nats nats://127.0.0.1:4222 -subject payments.received -consumer billing 42
inbox dead-letters replay -sqlite inbox.db -amqp amqp://guest:guest@127.0.0.1:5672/ -routing-key payments -consumer billing 42 43
inbox dead-letters replay -mysql $DSN -nats $NATS -subject orders.placed -all -consumer billing -error timeout -json
inbox dead-letters replay -postgres $DSN -kafka 10.0.0.1:9092,10.0.0.2:9092 -topic payments -consumer billing 42
inbox dead-letters replay -postgres $DSN -sqs https://sqs.eu-west-1.amazonaws.com/123456789012/payments -consumer billing 42
inbox dead-letters replay -sqlite inbox.db -sqs http://localhost:4566/000000000000/payments -sqs-endpoint http://localhost:4566 -consumer billing 42`,
}

// DefaultPublishTimeout is replay's -timeout: below the consumers' lock
// timeout (inbox.DefaultLockTimeout, 5 s), so that a consumer waiting
// for the dead row that the release holds across the publish is not
// turned away by default.
const DefaultPublishTimeout = 4 * time.Second

// brokerFlags select the broker and the destination of a replay.
type brokerFlags struct {
	nats, subject, typeHeader, idHeader string
	amqp, exchange, routingKey          string
	kafka, topic                        string
	kafkaTLS                            bool
	kafkaCA, kafkaSASL                  string
	sqs, sqsEndpoint                    string
	timeout                             time.Duration
}

func (b *brokerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.nats, "nats", "", "NATS server URL, e.g. nats://127.0.0.1:4222 (publish to JetStream)")
	fs.StringVar(&b.subject, "subject", "", "with -nats: the subject to publish to")
	fs.StringVar(&b.typeHeader, "type-header", broker.DefaultTypeHeader, "with -nats, -kafka or -sqs: the header (SQS: message attribute) for the message type, as the consumers' Config.TypeHeader or TypeAttribute")
	fs.StringVar(&b.idHeader, "id-header", broker.DefaultIDHeader, "with -kafka or -sqs: the header (SQS: message attribute) for the message ID, as the consumers' Config.IDHeader or IDAttribute")
	fs.StringVar(&b.amqp, "amqp", "", "RabbitMQ URL, e.g. amqp://guest:guest@127.0.0.1:5672/")
	fs.StringVar(&b.exchange, "exchange", "", "with -amqp: the exchange to publish to (default: the default exchange, which routes to the queue named by the routing key)")
	fs.StringVar(&b.routingKey, "routing-key", "", "with -amqp: the routing key (with the default exchange: the queue)")
	fs.StringVar(&b.kafka, "kafka", "", "Kafka seed brokers, host:port separated by commas, e.g. 127.0.0.1:9092")
	fs.StringVar(&b.topic, "topic", "", "with -kafka: the topic to produce to")
	fs.BoolVar(&b.kafkaTLS, "kafka-tls", false, "with -kafka: connect over TLS, checking the brokers' certificates against the system's roots")
	fs.StringVar(&b.kafkaCA, "kafka-ca", "", "with -kafka: connect over TLS, checking the brokers' certificates against the PEM certificates in this file")
	fs.StringVar(&b.kafkaSASL, "kafka-sasl", "", "with -kafka: authenticate with SASL: plain, scram-sha-256 or scram-sha-512; the user and password come from "+
		envKafkaUser+" and "+envKafkaPassword)
	fs.StringVar(&b.sqs, "sqs", "", "SQS queue URL, e.g. https://sqs.eu-west-1.amazonaws.com/123456789012/payments (credentials and region as the AWS CLI finds them)")
	fs.StringVar(&b.sqsEndpoint, "sqs-endpoint", "", "with -sqs: the SQS endpoint URL, for an emulator or LocalStack (default: AWS's, or AWS_ENDPOINT_URL_SQS)")
	fs.DurationVar(&b.timeout, "timeout", DefaultPublishTimeout, "how long to wait for the broker to confirm each publish (the release's transaction stays open meanwhile: keep it below the consumers' lock timeout)")
}

// shown is the destination as the output shows it (validate first).
func (b *brokerFlags) shown() string {
	switch {
	case b.nats != "":
		return "NATS subject " + strconv.Quote(b.subject)
	case b.kafka != "":
		return "Kafka topic " + strconv.Quote(b.topic)
	case b.sqs != "":
		return "SQS queue " + strconv.Quote(redact.DSN(b.sqs))
	case b.exchange != "":
		return fmt.Sprintf("RabbitMQ exchange %q, routing key %q", b.exchange, b.routingKey)
	}
	return "RabbitMQ routing key " + strconv.Quote(b.routingKey)
}

// kafkaTopic is a topic name Kafka accepts.
var kafkaTopic = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// validate checks that one broker and its destination were given.
func (b *brokerFlags) validate() error {
	given := 0
	for _, v := range []string{b.nats, b.amqp, b.kafka, b.sqs} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return errors.New("give one broker: one of -nats, -amqp, -kafka and -sqs")
	case given == 0:
		return errors.New("give a broker: -nats URL -subject S, -amqp URL -routing-key K, -kafka BROKERS -topic T or -sqs QUEUE_URL")
	case b.nats != "" && b.subject == "":
		return errors.New("-nats needs -subject")
	case b.amqp != "" && b.routingKey == "":
		return errors.New("-amqp needs -routing-key")
	case b.kafka != "" && b.topic == "":
		return errors.New("-kafka needs -topic")
	case b.subject != "" && b.nats == "", b.topic != "" && b.kafka == "", b.sqsEndpoint != "" && b.sqs == "",
		(b.exchange != "" || b.routingKey != "") && b.amqp == "":
		return errors.New("-subject goes with -nats, -exchange and -routing-key with -amqp, -topic with -kafka, -sqs-endpoint with -sqs")
	case b.timeout <= 0:
		return errors.New("-timeout must be positive")
	case b.typeHeader == "" || b.idHeader == "":
		return errors.New("-type-header and -id-header must not be empty")
	case !utf8.ValidString(b.typeHeader) || !utf8.ValidString(b.idHeader):
		return errors.New("-type-header and -id-header must be valid UTF-8")
	case (b.kafkaTLS || b.kafkaCA != "" || b.kafkaSASL != "") && b.kafka == "":
		return errors.New("-kafka-tls, -kafka-ca and -kafka-sasl go with -kafka")
	case b.kafkaSASL != "" && kafkaMechanisms[b.kafkaSASL] == nil:
		return fmt.Errorf("-kafka-sasl %s: want plain, scram-sha-256 or scram-sha-512", strconv.Quote(b.kafkaSASL))
	case b.kafkaSASL != "" && (os.Getenv(envKafkaUser) == "" || os.Getenv(envKafkaPassword) == ""):
		return fmt.Errorf("-kafka-sasl needs %s and %s in the environment", envKafkaUser, envKafkaPassword)
	case b.topic != "" && !kafkaTopic.MatchString(b.topic):
		return fmt.Errorf("-topic %s is not a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -)", strconv.Quote(b.topic))
	}
	if b.kafka != "" {
		for _, s := range strings.Split(b.kafka, ",") {
			host, port, err := net.SplitHostPort(s)
			if n, perr := strconv.Atoi(port); err != nil || perr != nil || host == "" || n < 1 || n > 65535 || strings.Contains(s, "@") {
				if i := strings.LastIndexByte(s, '@'); i >= 0 {
					s = "xxxxx" + s[i:] // credentials, perhaps: SASL's go elsewhere
				}
				return fmt.Errorf("-kafka: %s is not host:port", strconv.Quote(s))
			}
		}
	}
	if b.sqs != "" {
		if err := checkHTTPURL(b.sqs, true); err != nil {
			return fmt.Errorf("-sqs: %w", err)
		}
	}
	if b.sqsEndpoint != "" {
		if err := checkHTTPURL(b.sqsEndpoint, false); err != nil {
			return fmt.Errorf("-sqs-endpoint: %w", err)
		}
	}
	return nil
}

// checkHTTPURL checks that s is an http or https URL with a host, and
// with a path when path is set (a queue URL: /account/queue).
func checkHTTPURL(s string, path bool) error {
	u, err := url.Parse(s)
	switch {
	case !utf8.ValidString(s):
		return errors.New("the URL is not valid UTF-8")
	case err != nil:
		return fmt.Errorf("%s is not a URL", strconv.Quote(redact.DSN(s)))
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%s is not an http or https URL", strconv.Quote(redact.DSN(s)))
	case path && strings.Trim(u.Path, "/") == "":
		return fmt.Errorf("%s is not a queue URL: it names no queue", strconv.Quote(redact.DSN(s)))
	}
	return nil
}

// destination is where a replay publishes, and what the command prints
// of it.
type destination struct {
	replay.Destination
	// shown is the subject as printed (an SQS queue URL: redacted).
	shown string
	close func()
}

// publisher connects to the selected broker (validate first).
func (b *brokerFlags) publisher(ctx context.Context) (*destination, error) {
	switch {
	case b.nats != "":
		nc, err := nats.Connect(b.nats, nats.Timeout(b.timeout), nats.Name("inbox dead-letters replay"))
		if err != nil {
			return nil, fmt.Errorf("connecting to NATS at %s: %w", redact.DSN(b.nats), redact.Error(err, b.nats))
		}
		js, err := jetstream.New(nc)
		var pub broker.Publisher
		if err == nil {
			pub, err = natsjs.NewPublisher(js, &natsjs.PublisherConfig{TypeHeader: b.typeHeader, RefuseDuplicates: true})
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
		return &destination{Destination: replay.Destination{Publisher: pub, Subject: b.subject}, shown: b.subject, close: nc.Close}, nil
	case b.kafka != "":
		return b.kafkaPublisher(ctx)
	case b.sqs != "":
		return b.sqsPublisher(ctx)
	}
	p, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: b.amqp, Exchange: b.exchange, ConnectionName: "inbox dead-letters replay"})
	if err != nil {
		return nil, redact.Error(err, b.amqp)
	}
	return &destination{Destination: replay.Destination{Publisher: p, Subject: b.routingKey}, shown: b.routingKey, close: func() { _ = p.Close() }}, nil
}

// kafkaPublisher makes an idempotent producer, acks from all in-sync
// replicas (franz-go's defaults), that fails a record whose Publish
// timed out rather than send it after the replay rolled back.
func (b *brokerFlags) kafkaPublisher(ctx context.Context) (*destination, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(b.kafka, ",")...), kgo.ClientID("inbox-dead-letters-replay"),
		kgo.DialTimeout(b.timeout), kgo.ProducerLinger(0), kgo.AllowIdempotentProduceCancellation()}
	sec, err := b.kafkaSecurity()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, sec...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", redact.Error(err, b.kafka))
	}
	pctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("connecting to Kafka at %s: %w", redact.DSN(b.kafka), redact.Error(err, b.kafka))
	}
	pub, err := kafka.NewPublisher(cl, &kafka.PublisherConfig{IDHeader: b.idHeader, TypeHeader: b.typeHeader})
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &destination{Destination: replay.Destination{Publisher: pub, Subject: b.topic}, shown: b.topic, close: cl.Close}, nil
}

// The environment that holds Kafka's SASL credentials: a flag's value
// would show in ps.
const (
	envKafkaUser     = "INBOX_KAFKA_USER"
	envKafkaPassword = "INBOX_KAFKA_PASSWORD"
)

// kafkaMechanisms make the SASL mechanism of -kafka-sasl.
var kafkaMechanisms = map[string]func(user, pass string) sasl.Mechanism{
	"plain":         func(u, p string) sasl.Mechanism { return plain.Auth{User: u, Pass: p}.AsMechanism() },
	"scram-sha-256": func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha256Mechanism() },
	"scram-sha-512": func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha512Mechanism() },
}

// kafkaSecurity is the client's TLS and SASL, as the flags and the
// environment give them (validate first).
func (b *brokerFlags) kafkaSecurity() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if b.kafkaTLS || b.kafkaCA != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if b.kafkaCA != "" {
			pem, err := os.ReadFile(b.kafkaCA)
			if err != nil {
				return nil, fmt.Errorf("-kafka-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-kafka-ca: %s holds no PEM certificate", b.kafkaCA)
			}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if b.kafkaSASL != "" {
		opts = append(opts, kgo.SASL(kafkaMechanisms[b.kafkaSASL](os.Getenv(envKafkaUser), os.Getenv(envKafkaPassword))))
	}
	return opts, nil
}

// sqsRegion is the region in a queue URL of AWS's (sqs.REGION.amazonaws.com).
var sqsRegion = regexp.MustCompile(`^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)

// sqsPublisher loads the AWS configuration as the AWS CLI does
// (environment, shared files, SSO, instance roles); a region that none
// gives is read from the queue URL.
func (b *brokerFlags) sqsPublisher(ctx context.Context) (*destination, error) {
	secrets := []string{b.sqs, b.sqsEndpoint}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", redact.Error(err, secrets...))
	}
	if cfg.Region == "" {
		if u, err := url.Parse(b.sqs); err == nil {
			if m := sqsRegion.FindStringSubmatch(u.Hostname()); m != nil {
				cfg.Region = m[1]
			}
		}
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: set AWS_REGION, or a region in the AWS profile")
	}
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if cfg.Credentials == nil {
		return nil, errors.New("no AWS credentials found")
	}
	if _, err := cfg.Credentials.Retrieve(cctx); err != nil {
		return nil, fmt.Errorf("no AWS credentials: %w", redact.Error(err, secrets...))
	}
	cl := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		if b.sqsEndpoint != "" {
			o.BaseEndpoint = aws.String(b.sqsEndpoint)
		}
	})
	// A FIFO queue would drop a copy sent within 5 minutes of the
	// original, or of a replay killed before its COMMIT, and report it
	// sent: each replay gets a deduplication ID of its own.
	pub, err := inboxsqs.NewPublisher(cl, &inboxsqs.PublisherConfig{IDAttribute: b.idHeader, TypeAttribute: b.typeHeader,
		FreshDeduplication: true})
	if err != nil {
		return nil, err
	}
	return &destination{Destination: replay.Destination{Publisher: pub, Subject: b.sqs}, shown: redact.DSN(b.sqs), close: func() {}}, nil
}

// replayJSON is one dead letter in replay's JSON output.
type replayJSON struct {
	ID              int64  `json:"id"`
	Consumer        string `json:"consumer,omitempty"`
	ConsumerBase64  string `json:"consumer_base64,omitempty"`
	MessageID       string `json:"message_id,omitempty"`
	MessageIDBase64 string `json:"message_id_base64,omitempty"`
	// Status: replayed, processed_since (nothing published, the dead
	// letter removed), not_found, duplicate_window (retry later), refused
	// (another consumer's, or its key's scoping does not match
	// -scope-id-by-type: nothing changed), failed.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

func dlReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := replayCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	var bf brokerFlags
	bf.register(fs)
	ff := filterFlags{oneConsumer: true}
	ff.register(fs)
	all := fs.Bool("all", false, "replay every dead letter of -consumer that the filters select when the command starts (required to replay without IDs)")
	scope := fs.Bool("scope-id-by-type", false, "the consumer scopes IDs by type (inbox.Config.ScopeIDByType): publish the ID and type that the dead letter's key holds")
	lockTimeout := fs.Duration("lock-timeout", inbox.DefaultLockTimeout, "how long to wait for a dead letter's lock (another replay of it; SQLite: the database's write lock); MySQL/MariaDB round it up to whole seconds, at least 1s")
	asJSON := fs.Bool("json", false, "write JSON (an array, one object per dead letter)")
	dryRun := fs.Bool("dry-run", false, "with -all: print the dead letters that would be replayed; publish nothing, release nothing")
	list, p, err := ff.selection(fs, args, all, stdout, stderr)
	if err != nil {
		return err
	}
	if err := bf.validate(); err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	if *dryRun {
		if !*all {
			return usageError(fs, stderr, "-dry-run goes with -all")
		}
		d, err := sf.open(ctx, false, stderr)
		if err != nil {
			return err
		}
		defer d.close()
		return dryRunAll(ctx, d.inspect, p, "replay", bf.shown(), *asJSON, stdout)
	}
	dest, err := bf.publisher(ctx)
	if err != nil {
		return err
	}
	defer dest.close()
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()

	rp := &replayer{in: d.inspect, dest: dest, consumer: []byte(ff.consumer), scopeByType: *scope,
		lockTimeout: *lockTimeout, timeout: bf.timeout}
	return rp.run(ctx, list, *all, p, *asJSON, stdout, stderr)
}

// replayer replays dead letters of one consumer to one destination.
type replayer struct {
	in   inspection
	dest *destination
	// consumer: a dead letter of another is refused.
	consumer []byte
	// scopeByType: the consumer scopes IDs by type; publish the ID and
	// type of the key.
	scopeByType          bool
	lockTimeout, timeout time.Duration
}

// run replays the dead letters list, or with all those p selects, and
// writes what became of each.
func (rp *replayer) run(ctx context.Context, list []int64, all bool, p *store.DeadLetterSearchParams, asJSON bool, stdout, stderr io.Writer) error {
	if all {
		// Selected first: the consumer may dead-letter a replayed message
		// again, under a greater ID, which a scan would reach and replay.
		var err error
		if list, err = replay.SelectIDs(ctx, rp.in, p); err != nil {
			return err
		}
	}
	var err error
	var results []replayJSON
	var worst error // the failure that sets the exit status (worse)
	done := 0       // replayed, or removed (processed since)
	prog := newProgress(stderr, asJSON || !all, "went through", "dead letter", len(list))
	for _, id := range list {
		if err = ctx.Err(); err != nil {
			break
		}
		r := rp.one(ctx, id)
		results = append(results, r.json)
		if r.err == nil {
			done++
		}
		worst = worse(worst, r.err)
		prog.clear()
		switch {
		case asJSON:
		case r.err != nil:
			fmt.Fprintf(stderr, "inbox: dead letter %d: %v\n", id, r.err)
		default:
			fmt.Fprintln(stdout, r.done)
		}
		prog.add(1)
	}
	prog.finish()
	if asJSON {
		if results == nil {
			results = []replayJSON{}
		}
		if werr := writeJSON(stdout, results); werr != nil && err == nil {
			err = werr
		}
	} else if len(results) == 0 {
		fmt.Fprintln(stdout, "replayed no dead letters")
	}
	code := exitFailure
	var coded *codedError
	if errors.As(worst, &coded) {
		code = coded.code
	}
	switch {
	case err != nil && done > 0:
		return withCode(exitPartial, fmt.Errorf("partly done: replayed or removed %d of %s, then stopped: %w",
			done, plural(len(list), "dead letter"), err))
	case err != nil:
		return err
	case worst == nil:
		return nil
	case done > 0 && code != exitNotFound:
		// Each dead letter is replayed in a transaction of its own: those
		// done stay done, whatever became of the others.
		return withCode(exitPartial, fmt.Errorf("partly done: replayed or removed %d of %s; the others failed",
			done, plural(len(list), "dead letter")))
	}
	// Written per dead letter already (or in the JSON): the exit status
	// alone tells the worst failure.
	return withCode(code, errWritten)
}

// worse is the failure of a and b that sets the exit status of a command
// that acts on several rows: a failure (exit 1) is worse than one that a
// later run may get past (75), which is worse than a row not found (4).
// Either may be nil.
func worse(a, b error) error {
	rank := func(err error) int {
		var coded *codedError
		switch {
		case err == nil:
			return 0
		case !errors.As(err, &coded):
			return 3
		case coded.code == exitNotFound:
			return 1
		case coded.code == exitTempFail:
			return 2
		}
		return 3
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// errWritten: the failure was written already.
var errWritten = errors.New("")

// replayResult is what became of one dead letter.
type replayResult struct {
	json replayJSON
	done string // the line for stdout, when err is nil
	err  error  // a *codedError for exit statuses other than 1
}

// one replays dead letter id, in one transaction (see replayCommand),
// and phrases what became of it.
func (rp *replayer) one(ctx context.Context, id int64) (r replayResult) {
	res := (&replay.Replayer{Release: rp.in.release, Dest: rp.dest.Destination, Consumer: rp.consumer,
		ScopeByType: rp.scopeByType, LockTimeout: rp.lockTimeout, Timeout: rp.timeout}).One(ctx, id)
	key := res.Key
	r.json = replayJSON{ID: id, Status: string(res.Status)}
	if key.Consumer != nil {
		r.json.Consumer, r.json.ConsumerBase64 = jsonBytes(key.Consumer)
		r.json.MessageID, r.json.MessageIDBase64 = jsonBytes(key.MessageID)
	}
	var qe *replay.QuietWindowError
	var ce *replay.CommitError
	err := res.Err
	switch res.Status {
	case replay.ProcessedSince:
		r.done = fmt.Sprintf("dead letter %d: message %s of %s was processed since it was dead-lettered: nothing published, dead letter removed",
			id, text(key.MessageID), text(key.Consumer))
		return r
	case replay.Replayed:
		r.done = fmt.Sprintf("replayed dead letter %d: message %s of %s published to %q", id, text(key.MessageID), text(key.Consumer), rp.dest.shown)
		if rp.scopeByType {
			r.done += fmt.Sprintf(" as ID %s of type %s", text([]byte(res.Msg.ID)), text([]byte(res.Msg.Type)))
		}
		return r
	case replay.NotFound:
		r.err = withCode(exitNotFound, errors.New("no such dead letter (replayed or discarded already?)"))
	case replay.Refused:
		r.err = err
	case replay.DuplicateWindow:
		when := "once the stream's duplicate window has passed since the message was last published"
		if errors.As(err, &qe) {
			when = "after " + timeJSON(qe.Until())
		}
		r.err = withCode(exitTempFail, fmt.Errorf("%w; nothing changed: the dead letter and the message's dead inbox row are kept; "+
			"run the replay again %s", err, when))
	default:
		r.err = err
		if errors.As(err, &ce) {
			r.err = fmt.Errorf("published, then %w: whether the replay happened is unknown; if it did not, the consumer acks the published copy "+
				"as a duplicate and the dead letter is still there: run the replay again", err)
		}
	}
	r.json.Error = r.err.Error()
	return r
}
