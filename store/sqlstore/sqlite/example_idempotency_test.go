package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/inboxkit/inbox/idempotency"
)

// A charge made with an Idempotency-Key: the retry gets the first
// response, and the charge is made once. The same key with another body
// gets 422.
func Example_idempotencyKey() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()
	if _, err := db.Exec(`CREATE TABLE charges (id INTEGER PRIMARY KEY, amount INTEGER)`); err != nil {
		log.Fatal(err)
	}
	keys, err := idempotency.New(ctx, driver, &idempotency.Config{Anonymous: true})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", keys.Handle(func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) error {
		res, err := tx.ExecContext(r.Context(), `INSERT INTO charges (amount) SELECT 1000`)
		if err != nil {
			return err
		}
		id, _ := res.LastInsertId()
		w.WriteHeader(http.StatusCreated)
		_, err = fmt.Fprintf(w, "charge %d", id)
		return err
	}))

	post := func(key, body string) {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Header().Get("Content-Type") == "application/problem+json" {
			var p idempotency.Problem
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			fmt.Printf("%d %s\n", rec.Code, p.Code)
			return
		}
		fmt.Printf("%d %q replayed=%q\n", rec.Code, rec.Body.String(), rec.Header().Get(idempotency.ReplayedHeader))
	}
	post(`"k-1"`, `{"amount":1000}`)
	post(`"k-1"`, `{"amount":1000}`) // a retry
	post(`"k-1"`, `{"amount":5}`)    // the key reused for another request
	post(`k-1`, `{"amount":1000}`)   // not a string: malformed

	var n int
	if err := db.QueryRow(`SELECT count(*) FROM charges`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("charges:", n)
	// Output:
	// 201 "charge 1" replayed=""
	// 201 "charge 1" replayed="true"
	// 422 idempotency_key_reused
	// 400 idempotency_key_malformed
	// charges: 1
}
