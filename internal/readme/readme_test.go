// Package readme keeps README.md's Go blocks compiling: each becomes the
// body of a function with the variables a reader's program would have
// (ctx, pool, js, ib, delivery, ...), in a package built with the module,
// so that a block pasted into a program compiles too ("declared and not
// used" included).
package readme

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// preamble declares what README's blocks may use.
const preamble = `package readmeblocks

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/otelinbox"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/sqlstore"
)

var (
	_ = natsjs.NewSource
	_ = pgxstore.New
	_ = sqlstore.New
	_ = outbox.New[pgx.Tx]
	_ = otelinbox.New
	_ = nats.Connect
	_ = time.Second
)

// env is what a reader's program has at hand.
type env struct {
	ctx      context.Context
	pool     *pgxpool.Pool
	db       *sql.DB
	js       jetstream.JetStream
	ib       *inbox.Inbox[pgx.Tx]
	delivery broker.Delivery
	msgID    string
	body     []byte
	amount   int64
	account  string
	credit   inbox.Handler[pgx.Tx]
	// the outbox's
	driver    *pgxstore.Driver
	publisher broker.Publisher
	id        string
}
`

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestREADMEBlocksCompile(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllSubmatch(readme, -1)
	if len(blocks) < 2 {
		t.Fatalf("README has %d Go blocks, want the quick start and the consumer at least", len(blocks))
	}
	var src strings.Builder
	src.WriteString(preamble)
	for i, b := range blocks {
		fmt.Fprintf(&src, "\nfunc block%d(e env) error {\n\tctx, pool, db, js, ib, delivery := e.ctx, e.pool, e.db, e.js, e.ib, e.delivery\n"+
			"\tmsgID, body, amount, account, credit := e.msgID, e.body, e.amount, e.account, e.credit\n"+
			"\tdriver, publisher, id := e.driver, e.publisher, e.id\n"+
			"\t_, _, _, _, _, _, _, _, _, _, _, _, _, _ = ctx, pool, db, js, ib, delivery, msgID, body, amount, account, credit, driver, publisher, id\n"+
			"\t{\n%s\t}\n\treturn nil\n}\n", i+1, b[1])
	}
	// Inside the module, so that its go.mod resolves the imports; removed
	// after the build.
	dir, err := os.MkdirTemp(".", "readmeblocks-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "blocks.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("README's Go blocks do not compile:\n%s\nthe program:\n%s", out, numbered(src.String()))
	}
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}
