package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

func testMigrateConcurrently[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, err := h.Open(t, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- env.Driver.Migrate(ctx) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	ms := env.Driver.Migrations()
	if len(ms) == 0 || ms[0].Version != 1 || !strings.Contains(ms[0].SQL, "inbox") {
		t.Fatalf("migrations %v: want version 1 creating the inbox", ms)
	}
	ib := newInbox(t, env, inbox.Config{})
	if out, err := ib.Process(ctx, msg("after-migrate"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("process after migrate: %v %v", out.Status, err)
	}
}

func testHostileTables[TTx any](t *testing.T, h Harness[TTx]) {
	hostile := []string{`x"; DROP TABLE y; --`, "a'b", "a;b", "1abc", "a b", "a`b", "a-b", strings.Repeat("p", 200), "ä"}
	for _, s := range hostile {
		for _, tables := range []store.Tables{{Prefix: s}, {Schema: s}} {
			_, err := h.Open(t, tables)
			if !errors.Is(err, store.ErrInvalidTables) {
				t.Fatalf("tables %+v: %v, want ErrInvalidTables", tables, err)
			}
		}
	}
}

func testPrefix[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, err := h.Open(t, store.Tables{Prefix: "svc_"})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(env.Driver.Migrations()[0].SQL, "svc_inbox") {
		t.Fatal("migration SQL does not name the prefixed table")
	}
	ib := newInbox(t, env, inbox.Config{})
	if out, err := ib.Process(ctx, msg("p"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("%v %v", out.Status, err)
	}
}

// New refuses tables that are not migrated.
func testSchemaChecked[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, err := h.Open(t, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "c"}); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Fatalf("New on tables not migrated: %v, want ErrNotMigrated", err)
	}
	if v, err := env.Driver.SchemaVersion(ctx); v != 0 || err != nil {
		t.Fatalf("SchemaVersion before Migrate: %d %v, want 0", v, err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ms := env.Driver.Migrations()
	if v, err := env.Driver.SchemaVersion(ctx); v != ms[len(ms)-1].Version || err != nil {
		t.Fatalf("SchemaVersion after Migrate: %d %v, want %d", v, err, ms[len(ms)-1].Version)
	}
	if _, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "c"}); err != nil {
		t.Fatalf("New after Migrate: %v", err)
	}
	if env.Exec == nil || len(ms) < 2 {
		return
	}
	// Tables one migration behind the code, as after a deploy that did not
	// migrate.
	last := ms[len(ms)-1].Version
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Exec(ctx, tx, fmt.Sprintf("DELETE FROM %s WHERE version = %d", env.Tables.Name("inbox_migrations", quoteFor(env.Driver)), last)); err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	_, err = inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "c"})
	if !errors.Is(err, inbox.ErrNotMigrated) || !strings.Contains(err.Error(), fmt.Sprintf("needs %d", last)) {
		t.Fatalf("New on tables one version behind: %v, want ErrNotMigrated naming version %d", err, last)
	}
}

// quoteFor returns the identifier quoting of d's dialect.
func quoteFor[TTx any](d store.Driver[TTx]) func(string) string {
	if d.Dialect() == "mysql" {
		return store.QuoteBacktick
	}
	return store.QuoteDouble
}

func testDurability[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	w, err := env.Driver.DurabilityWarnings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 0 {
		t.Fatalf("durability warnings on the test database: %v", w)
	}
}
