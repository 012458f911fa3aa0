// Package readme keeps the Go blocks of README.md and docs/*.md compiling.
//
// A block that starts with "package " is a complete program. It is built in
// a directory of its own. Any other block becomes the body of a function.
// The function has the variables a reader's program would have (ctx, pool,
// js, ib, delivery, ...). So a block pasted into a program compiles too,
// "declared and not used" included. A "//line" directive before each block
// makes the compiler's errors name the markdown file and its line.
package readme

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// preamble declares what the snippet blocks may use.
const preamble = `package readmeblocks

import (
	"context"
	"database/sql"
	"fmt"
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
	_ = fmt.Sprint
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

// funcHead opens a snippet's function and binds env's fields to locals.
const funcHead = "\tctx, pool, db, js, ib, delivery := e.ctx, e.pool, e.db, e.js, e.ib, e.delivery\n" +
	"\tmsgID, body, amount, account, credit := e.msgID, e.body, e.amount, e.account, e.credit\n" +
	"\tdriver, publisher, id := e.driver, e.publisher, e.id\n" +
	"\t_, _, _, _, _, _, _, _, _, _, _, _, _, _ = ctx, pool, db, js, ib, delivery, msgID, body, amount, account, credit, driver, publisher, id\n"

// block is one ```go block of a markdown file.
type block struct {
	file string // the markdown file's path, as errors name it
	line int    // the line of the block's first line of code
	code string
}

// program reports whether the block is a whole program.
func (b block) program() bool {
	return strings.HasPrefix(strings.TrimSpace(b.code), "package ")
}

// goBlocks returns the ```go blocks of a markdown file, in order.
func goBlocks(file string, md []byte) []block {
	var (
		out  []block
		cur  *block
		code strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		t := strings.TrimSpace(l)
		switch {
		case cur == nil && t == "```go":
			cur = &block{file: file, line: n + 1}
			code.Reset()
		case cur != nil && t == "```":
			cur.code = code.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			code.WriteString(l)
			code.WriteByte('\n')
		}
	}
	return out
}

// build writes the blocks into a temporary directory of this module and
// builds them. Snippets go into one package, each program into its own.
// The error holds the compiler's output, whose positions are markdown lines.
func build(bs []block) error {
	// Inside the module, so that its go.mod resolves the imports; removed
	// after the build.
	dir, err := os.MkdirTemp(".", "readmeblocks-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var snippets strings.Builder
	snippets.WriteString(preamble)
	nsnippets := 0
	for i, b := range bs {
		if b.program() {
			pdir := filepath.Join(dir, fmt.Sprintf("program%d", i+1))
			if err := os.Mkdir(pdir, 0o755); err != nil {
				return err
			}
			src := fmt.Sprintf("//line %s:%d:1\n%s", b.file, b.line, b.code)
			if err := os.WriteFile(filepath.Join(pdir, "main.go"), []byte(src), 0o644); err != nil {
				return err
			}
			continue
		}
		nsnippets++
		fmt.Fprintf(&snippets, "\nfunc block%d(e env) error {\n%s\t{\n//line %s:%d:1\n%s\t}\n\treturn nil\n}\n",
			i+1, funcHead, b.file, b.line, b.code)
	}
	if nsnippets > 0 {
		if err := os.WriteFile(filepath.Join(dir, "blocks.go"), []byte(snippets.String()), 0o644); err != nil {
			return err
		}
	}
	// -o os.DevNull builds every package and writes nothing.
	out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir+"/...").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

// docFiles lists README.md and docs/*.md, relative to the repository's root.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, docs...)
}

func TestDocBlocksCompile(t *testing.T) {
	t.Parallel()
	var all []block
	for _, f := range docFiles(t) {
		md, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// An absolute path: a relative one in a //line directive is
		// taken relative to the generated file's directory.
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		bs := goBlocks(abs, md)
		if f == "../../README.md" && len(bs) < 1 {
			t.Fatalf("README has no Go block, want the quick start at least")
		}
		all = append(all, bs...)
	}
	if err := build(all); err != nil {
		t.Fatalf("Go blocks of README.md and docs/ do not compile (positions are the markdown's lines): %v", err)
	}
}

func TestGoBlocks(t *testing.T) {
	t.Parallel()
	md := "# t\n\ntext\n\n```go\nx := 1\n_ = x\n```\n\n```\nnot go\n```\n\n  ```go\npackage main\n\nfunc main() {}\n  ```\n"
	got := goBlocks("t.md", []byte(md))
	want := []block{
		{file: "t.md", line: 6, code: "x := 1\n_ = x\n"},
		{file: "t.md", line: 15, code: "package main\n\nfunc main() {}\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d blocks %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("block %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got[0].program() || !got[1].program() {
		t.Errorf("program() = %v, %v, want false, true", got[0].program(), got[1].program())
	}
}

func TestBuildNamesTheFailingBlock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		md   string
		want string // in the error; "" if the blocks compile
	}{
		{"snippet ok", "```go\n_ = ib\nreturn nil\n```\n", ""},
		{"program ok", "a\n```go\npackage main\n\nfunc main() {}\n```\n", ""},
		{"snippet undefined", "a\n\n```go\nx := 1\n_ = x\nreturn undefinedThing\n```\n", "bad.md:6:8: undefined: undefinedThing"},
		{"snippet unused", "```go\nunused := 1\n```\n", "bad.md:2:1: declared and not used: unused"},
		{"program undefined", "a\n```go\npackage main\n\nfunc main() { nope() }\n```\n", "bad.md:5:15: undefined: nope"},
		{"second program", "```go\npackage main\n\nfunc main() {}\n```\n\n```go\npackage main\n\nfunc main() { nope() }\n```\n", "bad.md:10:15: undefined: nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := build(goBlocks("/md/bad.md", []byte(tt.md)))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("build: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("build succeeded, want an error naming %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("build error does not name %q:\n%v", tt.want, err)
			}
		})
	}
}
