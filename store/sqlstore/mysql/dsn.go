package mysql

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/inboxkit/inbox/internal/redact"
	"github.com/inboxkit/inbox/store/sqlstore"
)

// dsnForm is the form of go-sql-driver/mysql's DSNs, as errors show it.
const dsnForm = "user:pass@tcp(host:port)/db"

// configError is Open's error for a DSN or an option it refuses. Its text
// starts with "mysql: Open"; errors.Is finds sqlstore.ErrInvalidConfig in it,
// and any other sentinel it was given.
type configError struct {
	msg  string
	errs []error
}

func (e *configError) Error() string   { return e.msg }
func (e *configError) Unwrap() []error { return e.errs }

func invalidConfig(also error, format string, args ...any) error {
	errs := []error{sqlstore.ErrInvalidConfig}
	if also != nil {
		errs = append(errs, also)
	}
	return &configError{msg: "mysql: Open: " + fmt.Sprintf(format, args...), errs: errs}
}

// isURL reports whether dsn begins with a URL's scheme and "://", which
// go-sql-driver/mysql would misread (mysql://root@tcp(h)/db as the user
// "mysql" with the password "//root").
func isURL(dsn string) bool {
	i := strings.Index(dsn, "://")
	return i > 0 && strings.Trim(strings.ToLower(dsn[:i]), "abcdefghijklmnopqrstuvwxyz0123456789+-.") == ""
}

// badDSN is Open's error for a DSN that go-sql-driver/mysql cannot use:
// it shows the form wanted and, when it can, dsn rewritten in it, with
// the password masked. parseErr is the driver's error, nil for a URL.
func badDSN(dsn string, parseErr error) error {
	if isURL(dsn) {
		if s, ok := fromURL(dsn); ok {
			return invalidConfig(nil, "a URL is not a go-sql-driver/mysql DSN, which is %s: write %s", dsnForm, s)
		}
		return invalidConfig(nil, "a URL is not a go-sql-driver/mysql DSN, which is %s", dsnForm)
	}
	msg := redact.Text(parseErr.Error(), dsn)
	if s, ok := withTCP(dsn); ok {
		return invalidConfig(nil, "the DSN's address lacks tcp(...) around it (%s): go-sql-driver/mysql wants %s: write %s", msg, dsnForm, s)
	}
	return invalidConfig(nil, "%s: go-sql-driver/mysql wants %s", msg, dsnForm)
}

// fromURL rewrites a URL as a DSN: mysql://u:p@h:3306/db?x=1 as
// u:xxxxx@tcp(h:3306)/db?x=1.
func fromURL(dsn string) (string, bool) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return "", false
	}
	var b strings.Builder
	if u.User != nil {
		b.WriteString(u.User.Username())
		if _, ok := u.User.Password(); ok {
			b.WriteString(":" + redact.Mask)
		}
		b.WriteString("@")
	}
	b.WriteString("tcp(" + u.Host + ")/" + strings.TrimPrefix(u.Path, "/"))
	if u.RawQuery != "" {
		b.WriteString("?" + u.RawQuery)
	}
	return b.String(), true
}

// withTCP rewrites u:p@h:3306/db as u:xxxxx@tcp(h:3306)/db: a DSN whose
// address has no network around it.
func withTCP(dsn string) (string, bool) {
	slash := strings.LastIndexByte(dsn, '/')
	if slash < 0 {
		return "", false
	}
	at := strings.LastIndexByte(dsn[:slash], '@')
	addr := dsn[at+1 : slash]
	if addr == "" || strings.ContainsAny(addr, "()") {
		return "", false
	}
	user := ""
	if at >= 0 {
		user = dsn[:at]
		if c := strings.IndexByte(user, ':'); c >= 0 {
			user = user[:c+1] + redact.Mask
		}
		user += "@"
	}
	return user + "tcp(" + addr + ")" + dsn[slash:], true
}
