package sqldialect

// Aborter is implemented by a dialect whose server aborts a transaction
// when a statement fails (PostgreSQL): its COMMIT then rolls back.
type Aborter interface {
	// Aborted returns the error to report for err when err says that the
	// transaction was aborted, nil otherwise. err is a COMMIT's error when
	// committing is true, else that of CheckTx's statement.
	Aborted(err error, committing bool) error
}
