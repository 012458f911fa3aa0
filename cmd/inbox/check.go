package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/redact"
	"github.com/inboxkit/inbox/store"
)

var checkCommand = command{
	name: "check",
	synopsis: "inbox check " + storeSynopsis + `
    [-retention D] [-nats URL -stream S | -amqp URL -queue Q] [-json]`,
	description: `Checks what the inbox's guarantee rests on, and exits 3 when it finds a
problem (1 when it cannot ask the database or the broker):
  - the schema: the migrations applied to the tables against those of this
    command (behind: run inbox migrate);
  - the database's durability settings (synchronous_commit, fsync;
    innodb_flush_log_at_trx_commit; SQLite's journal mode and synchronous):
    a setting that lets a committed claim be lost in a crash;
  - replication: a PostgreSQL primary whose commits wait for none of its
    standbys (a failover loses the last commits), and a database that takes
    no writes (a standby, a read-only server);
  - the retention against the broker's redelivery window: with -nats and
    -stream, the stream's MaxAge (a window longer than -retention means a
    redelivery after its ID was pruned is processed again); the stream's
    duplicate window is reported too (see dead-letters replay). With -amqp
    and -queue the queue must exist; AMQP cannot read its message TTL (a
    policy or x-message-ttl), so the window is reported as unknown.
    Without a broker, or with -amqp, the retention is compared with no
    window, only with the pruner's minimum: retention_compared is false in
    the JSON output, and a note says why.
Notes (a broker keeping messages without a time limit) do not fail the
check.`,
	examples: `inbox check -sqlite inbox.db
inbox check -postgres $DSN -nats nats://127.0.0.1:4222 -stream PAYMENTS -retention 168h -json`,
}

// checkJSON is check's JSON output.
type checkJSON struct {
	OK bool `json:"ok"`
	// Schema: the highest migration version applied, and this command's.
	SchemaApplied int      `json:"schema_applied"`
	SchemaLatest  int      `json:"schema_latest"`
	Durability    []string `json:"durability_warnings"`
	Retention     string   `json:"retention"`
	// RetentionCompared: the retention was compared with the broker's
	// redelivery window (-nats and -stream, the stream found); the notes
	// say why not.
	RetentionCompared bool `json:"retention_compared"`
	// RedeliveryWindow is the broker's, "" when unknown or not asked,
	// "unlimited" when it keeps messages without a time limit.
	RedeliveryWindow string   `json:"redelivery_window,omitempty"`
	DuplicateWindow  string   `json:"duplicate_window,omitempty"`
	Problems         []string `json:"problems"`
	Notes            []string `json:"notes"`
}

func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := checkCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	retention := fs.Duration("retention", inbox.DefaultRetention, "the pruner's retention (PrunerConfig.Retention; 0 is the default, as there)")
	natsURL := fs.String("nats", "", "NATS server URL, with -stream")
	stream := fs.String("stream", "", "with -nats: the JetStream stream the consumers read")
	amqpURL := fs.String("amqp", "", "RabbitMQ URL, with -queue")
	queue := fs.String("queue", "", "with -amqp: the queue the consumers read")
	asJSON := fs.Bool("json", false, "write JSON")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	switch {
	case (*natsURL == "") != (*stream == ""):
		return usageError(fs, stderr, "-nats and -stream go together")
	case (*amqpURL == "") != (*queue == ""):
		return usageError(fs, stderr, "-amqp and -queue go together")
	case *natsURL != "" && *amqpURL != "":
		return usageError(fs, stderr, "give one broker")
	}
	if *retention == 0 {
		*retention = inbox.DefaultRetention
	}
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	r := checkJSON{Retention: retention.String(), Durability: []string{}, Problems: []string{}, Notes: []string{}}
	if err := checkDatabase(ctx, d, &r); err != nil {
		return err
	}
	if *retention < inbox.MinRetention {
		r.Problems = append(r.Problems, fmt.Sprintf("-retention %v is below the pruner's minimum of %v", *retention, inbox.MinRetention))
	}

	// A broker that cannot be asked fails the check (exit 1): a problem
	// (exit 3) is something found.
	var problem string
	switch {
	case *natsURL != "":
		problem, err = checkNATS(ctx, *natsURL, *stream, *retention, &r)
	case *amqpURL != "":
		if problem, err = checkAMQP(*amqpURL, *queue); err == nil && problem == "" {
			r.Notes = append(r.Notes, fmt.Sprintf("queue %s exists; its redelivery window is unknown: RabbitMQ keeps a message until it is acked unless a message TTL (a policy or x-message-ttl) drops it, which AMQP cannot read; the retention was not compared with it", *queue))
		}
	default:
		r.Notes = append(r.Notes, "the retention was not compared with a broker's redelivery window: no broker given (-nats URL -stream S compares it with the stream's MaxAge)")
	}
	if err != nil {
		return err
	}
	if problem != "" {
		r.Problems = append(r.Problems, problem)
	}
	r.OK = len(r.Problems) == 0
	if *asJSON {
		if err := writeJSON(stdout, r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "schema:     migration %d applied, %d latest\n", r.SchemaApplied, r.SchemaLatest)
		fmt.Fprintf(stdout, "durability: %s\n", plural(len(r.Durability), "warning"))
		fmt.Fprintf(stdout, "retention:  %s", r.Retention)
		if !r.RetentionCompared {
			fmt.Fprint(stdout, ", not compared with a broker's redelivery window")
		}
		if r.RedeliveryWindow != "" {
			fmt.Fprintf(stdout, ", broker's redelivery window %s", r.RedeliveryWindow)
		}
		if r.DuplicateWindow != "" {
			fmt.Fprintf(stdout, ", duplicate window %s", r.DuplicateWindow)
		}
		fmt.Fprintln(stdout)
		for _, p := range r.Problems {
			fmt.Fprintf(stdout, "problem: %s\n", p)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(stdout, "note: %s\n", n)
		}
		if r.OK {
			fmt.Fprintln(stdout, "ok")
		}
	}
	if !r.OK {
		return errProblem
	}
	return nil
}

// checkDatabase adds to r what the database's durability settings and
// schema version show. The durability settings come first: a database
// that takes no writes may refuse the schema's read too (a Galera node
// cut off from the others).
func checkDatabase(ctx context.Context, d *opened, r *checkJSON) error {
	w, durErr := d.DurabilityWarnings(ctx)
	readOnly := errors.Is(durErr, store.ErrReadOnly)
	switch {
	case readOnly:
		r.Problems = append(r.Problems, durErr.Error())
	case durErr != nil:
		return fmt.Errorf("reading the durability settings: %w", durErr)
	}
	r.Durability = append(r.Durability, w...)
	r.Problems = append(r.Problems, w...)
	applied, schemaErr := d.SchemaVersion(ctx)
	if schemaErr != nil {
		if !readOnly {
			return fmt.Errorf("reading the schema version: %w", schemaErr)
		}
		r.Notes = append(r.Notes, fmt.Sprintf("the schema version could not be read: %v", schemaErr))
	}
	r.SchemaApplied = applied
	if ms := d.Migrations(); len(ms) > 0 {
		r.SchemaLatest = ms[len(ms)-1].Version
	}
	switch {
	case schemaErr != nil: // read-only, said above
	case r.SchemaApplied < r.SchemaLatest:
		r.Problems = append(r.Problems, fmt.Sprintf("the tables are at migration %d, this command's latest is %d: run inbox migrate", r.SchemaApplied, r.SchemaLatest))
	case r.SchemaApplied > r.SchemaLatest:
		r.Notes = append(r.Notes, fmt.Sprintf("the tables are at migration %d, newer than this command's %d: use a newer inbox command", r.SchemaApplied, r.SchemaLatest))
	}
	return nil
}

// windowSource is a broker.Source that only tells its redelivery window,
// for inbox.CheckRetention, without a consumer (a natsjs.Source would
// create or update the durable consumer).
type windowSource struct {
	window func(ctx context.Context) (time.Duration, error)
}

func (windowSource) Next(context.Context) (broker.Delivery, error) {
	return nil, errors.New("inbox check: not a consumer")
}
func (windowSource) Close() error { return nil }
func (s windowSource) RedeliveryWindow(ctx context.Context) (time.Duration, error) {
	return s.window(ctx)
}

// checkNATS fills in r's windows from the stream's info, read once; it
// returns a problem found (a missing stream, a retention shorter than
// the window), or an error when NATS could not be asked.
func checkNATS(ctx context.Context, url, stream string, retention time.Duration, r *checkJSON) (problem string, err error) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second), nats.Name("inbox check"))
	if err != nil {
		return "", fmt.Errorf("connecting to NATS at %s: %w", redact.DSN(url), redact.Error(err, url))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	st, err := js.Stream(ctx, stream) // reads the stream's info
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Sprintf("stream %s: %v", stream, err), nil
	case err != nil:
		return "", fmt.Errorf("stream %s: %w", stream, err)
	}
	cfg := st.CachedInfo().Config
	r.DuplicateWindow = cfg.Duplicates.String()
	// The window as natsjs.RedeliveryWindow tells it (the stream's MaxAge),
	// from the info read above.
	src := windowSource{window: func(context.Context) (time.Duration, error) { return cfg.MaxAge, nil }}
	warning, note, err := inbox.CheckRetention(ctx, src, retention)
	if err != nil {
		return "", err
	}
	r.RetentionCompared = true
	r.RedeliveryWindow = "unlimited"
	if cfg.MaxAge > 0 {
		r.RedeliveryWindow = cfg.MaxAge.String()
	}
	if note != "" {
		r.Notes = append(r.Notes, note)
	}
	return warning, nil
}

// checkAMQP returns a problem found (a missing queue), or an error when
// RabbitMQ could not be asked.
func checkAMQP(url, queue string) (problem string, err error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "inbox check"}, Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return "", fmt.Errorf("connecting to RabbitMQ at %s: %w", redact.DSN(url), redact.Error(err, url))
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return "", err
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return fmt.Sprintf("queue %s: %v", queue, err), nil
	case err != nil:
		return "", fmt.Errorf("queue %s: %w", queue, err)
	}
	return "", nil
}
