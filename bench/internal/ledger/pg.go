package ledger

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox"
)

// PG is the workload's tables in one PostgreSQL schema, and the
// statements that write them.
type PG struct {
	Schema string
	// Insert adds a ledger row: $1 message ID, $2 account, $3 amount.
	Insert string
	// Add credits an account: $1 account, $2 amount.
	Add string
	// InsertMany adds many ledger rows from three arrays.
	InsertMany string
}

// NewPG names the statements on schema's tables.
func NewPG(schema string) *PG {
	return &PG{Schema: schema,
		Insert:     "INSERT INTO " + schema + ".ledger (msg_id, account, amount) VALUES ($1, $2, $3)",
		Add:        "UPDATE " + schema + ".accounts SET balance = balance + $2 WHERE id = $1",
		InsertMany: "INSERT INTO " + schema + ".ledger (msg_id, account, amount) SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])",
	}
}

// DDL creates the schema, the ledger, and the accounts, each at 0.
func (p *PG) DDL(accounts int) string {
	s := p.Schema
	return "CREATE SCHEMA " + s + ";" +
		"CREATE TABLE " + s + ".ledger (msg_id text NOT NULL, account bigint NOT NULL, amount bigint NOT NULL);" +
		"CREATE TABLE " + s + ".accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);" +
		"INSERT INTO " + s + ".accounts SELECT g, 0 FROM generate_series(0, " + strconv.Itoa(accounts-1) + ") g;" +
		"ANALYZE " + s + ".accounts"
}

// Record inserts e's ledger row and credits its account: two statements,
// a round trip each.
func (p *PG) Record(ctx context.Context, tx pgx.Tx, e Entry) error {
	if _, err := tx.Exec(ctx, p.Insert, e.ID, e.Account, e.Amount); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, p.Add, e.Account, e.Amount)
	return err
}

// RecordEach runs Record for each entry in turn, as Consume with a
// BatchSize runs its per-message handler in the batch's transaction.
func (p *PG) RecordEach(ctx context.Context, tx pgx.Tx, es []Entry) error {
	for _, e := range es {
		if err := p.Record(ctx, tx, e); err != nil {
			return err
		}
	}
	return nil
}

// RecordBatch inserts the ledger rows in one statement, then credits the
// accounts in the order of their ids, in one round trip.
func (p *PG) RecordBatch(ctx context.Context, tx pgx.Tx, es []Entry) error {
	ids, accounts, amounts := make([]string, len(es)), make([]int64, len(es)), make([]int64, len(es))
	for i, e := range es {
		ids[i], accounts[i], amounts[i] = e.ID, e.Account, e.Amount
	}
	if _, err := tx.Exec(ctx, p.InsertMany, ids, accounts, amounts); err != nil {
		return err
	}
	var b pgx.Batch
	for _, c := range Credits(es) {
		b.Queue(p.Add, c.Account, c.Amount)
	}
	return tx.SendBatch(ctx, &b).Close()
}

// Queue queues Record's statements, for inbox.ConsumeQueued.
func (p *PG) Queue(q *inbox.Queue, e Entry) {
	q.Add(p.Insert, e.ID, e.Account, e.Amount)
	q.Add(p.Add, e.Account, e.Amount)
}

// Rows is what reads the tables: a pool or a connection.
type Rows interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReadState reads the ledger and the accounts.
func (p *PG) ReadState(ctx context.Context, db Rows) (*State, error) {
	s := NewState()
	if err := db.QueryRow(ctx, "SELECT count(*), count(DISTINCT msg_id) FROM "+p.Schema+".ledger").Scan(&s.Rows, &s.Distinct); err != nil {
		return nil, err
	}
	if err := pairs(ctx, db, "SELECT account, sum(amount)::bigint FROM "+p.Schema+".ledger GROUP BY account", s.Sums); err != nil {
		return nil, err
	}
	if err := pairs(ctx, db, "SELECT id, balance FROM "+p.Schema+".accounts WHERE balance <> 0", s.Balances); err != nil {
		return nil, err
	}
	return s, nil
}

func pairs(ctx context.Context, db Rows, q string, into map[int64]int64) error {
	rows, err := db.Query(ctx, q)
	if err != nil {
		return err
	}
	var k, v int64
	_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error { into[k] = v; return nil })
	return err
}
