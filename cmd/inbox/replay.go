package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/store"
)

var replayCommand = command{
	name: "replay",
	synopsis: `inbox dead-letters replay (-postgres DSN | -mysql DSN | -sqlite FILE)
    (-nats URL -subject S [-type-header H] | -amqp URL [-exchange E] -routing-key K)
    [-timeout D] [-lock-timeout D] [-json] (ID... | -all [filters])`,
	description: `Sends dead letters back through their broker, so that the consumer that
dead-lettered them, running with its handler fixed, processes each once:
it publishes the payload, headers and type with the message's original ID
(NATS: Nats-Msg-Id; RabbitMQ: message_id, with publisher confirms) and
releases the message's dead inbox row. The consumer must key messages by
their broker ID (ConsumerConfig.ID's default) and not use ScopeIDByType.

Each dead letter is replayed in one transaction of the database, in this
order: lock and delete the dead letter, delete the message's dead inbox
row and failed attempts, publish and wait for the broker's confirmation,
COMMIT. Until the COMMIT, nothing is changed for anyone else: a consumer
that receives the published copy meanwhile waits for the row's lock (a
lock timeout is a retry). So the effect happens once, whatever happens:
  - killed before the COMMIT: the database rolls back; the published copy
    finds the dead row and is acked as a duplicate; the dead letter is
    still there, for the next run;
  - run twice: the second run finds no dead letter (exit status 4);
  - the message was processed since it was dead-lettered (a redelivery
    after its dead row was pruned): nothing is published and the dead
    letter is removed, as inbox.Replay does.
NATS JetStream drops a publish whose ID it saw within the stream's
duplicate window (2 min by default) and says so: the replay then rolls
back, changes nothing, and exits 75; run it again once the window has
passed since the message was last published. A COMMIT that fails after the
publish leaves it unknown whether the replay happened; either way the
effect happens at most once: run the command again.

A dead letter without its payload (the database refused it) or with an
invalid ID cannot be replayed: discard it.`,
	examples: `inbox dead-letters replay -postgres $DSN -nats nats://127.0.0.1:4222 -subject payments.received 42
inbox dead-letters replay -sqlite inbox.db -amqp amqp://guest:guest@127.0.0.1:5672/ -routing-key payments 42 43
inbox dead-letters replay -mysql $DSN -nats $NATS -subject orders.placed -all -consumer billing -error timeout -json`,
}

// brokerFlags select the broker and the destination of a replay.
type brokerFlags struct {
	nats, subject, typeHeader  string
	amqp, exchange, routingKey string
	timeout                    time.Duration
}

func (b *brokerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.nats, "nats", "", "NATS server URL, e.g. nats://127.0.0.1:4222 (publish to JetStream)")
	fs.StringVar(&b.subject, "subject", "", "with -nats: the subject to publish to")
	fs.StringVar(&b.typeHeader, "type-header", broker.DefaultTypeHeader, "with -nats: the header for the message type (the consumers' natsjs Config.TypeHeader)")
	fs.StringVar(&b.amqp, "amqp", "", "RabbitMQ URL, e.g. amqp://guest:guest@127.0.0.1:5672/")
	fs.StringVar(&b.exchange, "exchange", "", "with -amqp: the exchange to publish to (default: the default exchange, which routes to the queue named by the routing key)")
	fs.StringVar(&b.routingKey, "routing-key", "", "with -amqp: the routing key (with the default exchange: the queue)")
	fs.DurationVar(&b.timeout, "timeout", 10*time.Second, "how long to wait for the broker to confirm each publish")
}

// validate checks that one broker and its destination were given.
func (b *brokerFlags) validate() error {
	switch {
	case b.nats != "" && b.amqp != "":
		return errors.New("give one of -nats and -amqp")
	case b.nats != "" && b.subject == "":
		return errors.New("-nats needs -subject")
	case b.amqp != "" && b.routingKey == "":
		return errors.New("-amqp needs -routing-key")
	case b.nats == "" && b.amqp == "":
		return errors.New("give -nats URL -subject S or -amqp URL -routing-key K")
	}
	return nil
}

// publisher connects to the selected broker (validate first); close
// disconnects.
func (b *brokerFlags) publisher(ctx context.Context) (pub broker.Publisher, subject string, close func(), err error) {
	if b.nats != "" {
		nc, err := nats.Connect(b.nats, nats.Timeout(b.timeout), nats.Name("inbox dead-letters replay"))
		if err != nil {
			return nil, "", nil, fmt.Errorf("connecting to NATS at %s: %w", b.nats, err)
		}
		js, err := jetstream.New(nc)
		if err == nil {
			pub, err = natsjs.NewPublisher(js, &natsjs.PublisherConfig{TypeHeader: b.typeHeader, RefuseDuplicates: true})
		}
		if err != nil {
			nc.Close()
			return nil, "", nil, err
		}
		return pub, b.subject, nc.Close, nil
	}
	p, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: b.amqp, Exchange: b.exchange, ConnectionName: "inbox dead-letters replay"})
	if err != nil {
		return nil, "", nil, err
	}
	return p, b.routingKey, func() { _ = p.Close() }, nil
}

// replayJSON is one dead letter in replay's JSON output.
type replayJSON struct {
	ID              int64  `json:"id"`
	Consumer        string `json:"consumer,omitempty"`
	ConsumerBase64  string `json:"consumer_base64,omitempty"`
	MessageID       string `json:"message_id,omitempty"`
	MessageIDBase64 string `json:"message_id_base64,omitempty"`
	// Status: replayed, processed_since (nothing published, the dead
	// letter removed), not_found, duplicate_window (retry later), failed.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

func dlReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := replayCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	var bf brokerFlags
	bf.register(fs)
	var ff filterFlags
	ff.register(fs)
	all := fs.Bool("all", false, "replay every dead letter the filters select (required to replay without IDs)")
	lockTimeout := fs.Duration("lock-timeout", inbox.DefaultLockTimeout, "how long to wait for a dead letter's lock (another replay of it)")
	asJSON := fs.Bool("json", false, "write JSON (an array, one object per dead letter)")
	list, p, err := ff.selection(fs, args, all, stdout, stderr)
	if err != nil {
		return err
	}
	if err := bf.validate(); err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	pub, subject, closePub, err := bf.publisher(ctx)
	if err != nil {
		return err
	}
	defer closePub()
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()

	rp := &replayer{in: d.inspect, pub: pub, subject: subject, lockTimeout: *lockTimeout, timeout: bf.timeout}
	return rp.run(ctx, list, *all, p, *asJSON, stdout, stderr)
}

// replayer replays dead letters to one destination.
type replayer struct {
	in                   inspection
	pub                  broker.Publisher
	subject              string
	lockTimeout, timeout time.Duration
}

// run replays the dead letters list, or with all those p selects, and
// writes what became of each.
func (rp *replayer) run(ctx context.Context, list []int64, all bool, p *store.DeadLetterSearchParams, asJSON bool, stdout, stderr io.Writer) error {
	var err error
	var results []replayJSON
	var first error // the first failure, for the exit status
	one := func(id int64) {
		r := replayOne(ctx, rp.in, rp.pub, rp.subject, id, rp.lockTimeout, rp.timeout)
		results = append(results, r.json)
		if r.err != nil {
			if first == nil {
				first = r.err
			}
			if !asJSON {
				fmt.Fprintf(stderr, "inbox: dead letter %d: %v\n", id, r.err)
			}
			return
		}
		if !asJSON {
			fmt.Fprintln(stdout, r.done)
		}
	}
	if all {
		_, err = eachPage(ctx, rp.in, p, func(page []int64) ([]int64, error) {
			for _, id := range page {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				one(id)
			}
			return nil, nil
		})
	} else {
		for _, id := range list {
			if ctx.Err() != nil {
				err = ctx.Err()
				break
			}
			one(id)
		}
	}
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
	if err != nil {
		return err
	}
	if first != nil {
		var coded *codedError
		code := exitFailure
		if errors.As(first, &coded) {
			code = coded.code
		}
		// Written per dead letter already (or in the JSON): the exit status
		// alone tells the first failure.
		return withCode(code, errWritten)
	}
	return nil
}

// errWritten: the failure was written already.
var errWritten = errors.New("")

// replayResult is what became of one dead letter.
type replayResult struct {
	json replayJSON
	done string // the line for stdout, when err is nil
	err  error  // a *codedError for exit statuses other than 1
}

// replayOne replays dead letter id, in one transaction (see replayCommand).
func replayOne(ctx context.Context, in inspection, pub broker.Publisher, subject string, id int64, lt, timeout time.Duration) (r replayResult) {
	r.json = replayJSON{ID: id}
	var msg *broker.Message
	err := in.release(ctx, id, lt, func(dl *store.DeadLetter, live bool) error {
		r.json.Consumer, r.json.ConsumerBase64 = jsonBytes(dl.Key.Consumer)
		r.json.MessageID, r.json.MessageIDBase64 = jsonBytes(dl.Key.MessageID)
		if live {
			return nil // the dead letter goes, nothing is published
		}
		var err error
		if msg, err = replayMessage(dl, subject); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return pub.Publish(pctx, msg)
	})
	var de *natsjs.DuplicateError
	var ce *commitError
	switch {
	case err == nil && msg == nil:
		r.json.Status = "processed_since"
		r.done = fmt.Sprintf("dead letter %d: message %s of %s was processed since it was dead-lettered: nothing published, dead letter removed",
			id, text([]byte(r.json.MessageID+r.json.MessageIDBase64)), text([]byte(r.json.Consumer+r.json.ConsumerBase64)))
		return r
	case err == nil:
		r.json.Status = "replayed"
		r.done = fmt.Sprintf("replayed dead letter %d: message %s of %s published to %q", id, text([]byte(msg.ID)),
			text([]byte(r.json.Consumer+r.json.ConsumerBase64)), subject)
		return r
	case errors.Is(err, store.ErrNotFound):
		r.json.Status, r.err = "not_found", withCode(exitNotFound, errors.New("no such dead letter (replayed or discarded already?)"))
	case errors.As(err, &de):
		window := "the stream's duplicate window"
		if de.Window > 0 {
			window = fmt.Sprintf("the stream's duplicate window (%v)", de.Window)
		}
		r.json.Status = "duplicate_window"
		r.err = withCode(exitTempFail, fmt.Errorf("%w; nothing changed: the dead letter and the message's dead inbox row are kept; "+
			"run the replay again once %s has passed since the message was last published", err, window))
	case errors.As(err, &ce):
		r.json.Status = "failed"
		r.err = fmt.Errorf("published, then %w: whether the replay happened is unknown; if it did not, the consumer acks the published copy "+
			"as a duplicate and the dead letter is still there: run the replay again", err)
	default:
		r.json.Status, r.err = "failed", err
	}
	r.json.Error = r.err.Error()
	return r
}

// replayMessage is the message that replays dl to subject, or why it
// cannot be replayed.
func replayMessage(dl *store.DeadLetter, subject string) (*broker.Message, error) {
	if bytes.Equal(dl.Headers, headers.LostMarker) {
		return nil, fmt.Errorf("%w: its payload and headers were not kept; discard it", inbox.ErrPayloadLost)
	}
	if n := len(dl.Key.MessageID); n == 0 || n > inbox.MaxIDLen {
		return nil, fmt.Errorf("its message ID of %d bytes is invalid (1..%d): it cannot be replayed; discard it", n, inbox.MaxIDLen)
	}
	h, err := headers.Decode(dl.Headers)
	if err != nil {
		return nil, err
	}
	return &broker.Message{ID: string(dl.Key.MessageID), Subject: subject, Type: dl.Type, Payload: dl.Payload, Headers: h}, nil
}
