// Package redact hides the passwords of URLs and DSNs in what is printed:
// errors and log lines. It works on strings that do not parse too, since
// url.Parse's own error repeats the whole URL.
//
// It knows the forms the inbox takes: URLs (amqp://user:password@host/,
// NATS's comma-separated lists, nats://token@host, ?password=...),
// PostgreSQL's keyword/value DSNs (password = '...', read as pgconn reads
// them) and go-sql-driver/mysql's user:password@tcp(host)/db.
package redact

import (
	"cmp"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Mask is what a password is replaced by.
const Mask = "xxxxx"

// minSecret is the shortest password replaced wherever it occurs in a
// text: a shorter one would mask unrelated letters. Passwords in URLs and
// password= values are masked by position whatever their length.
const minSecret = 3

// DSN returns dsn, a URL, a list of URLs, or a DSN, with its passwords
// replaced by Mask.
func DSN(dsn string) string { return Text(dsn, dsn) }

// Text returns text with the passwords of dsns replaced by Mask wherever
// they occur (as given, percent-decoded, and Go-quoted), and those of the
// URLs and password = values in text itself.
func Text(text string, dsns ...string) string {
	var secrets []string
	for _, d := range dsns {
		for _, p := range passwords(d) {
			secrets = append(secrets, forms(p)...)
		}
	}
	// Longest first, so that a password containing another is masked whole.
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, s := range secrets {
		if len(s) >= minSecret {
			text = strings.ReplaceAll(text, s, Mask)
			continue
		}
		// url.Parse's error for a password cut at '/', '?' or '#':
		// parse "amqp://app:Sup3r": invalid port ":Sup3r" after host.
		for _, q := range []string{`":` + s + `"`, `:` + s + `"`} {
			text = strings.ReplaceAll(text, q, strings.Replace(q, s, Mask, 1))
		}
	}
	// Masking by position comes last: a URL's password masked first could
	// cut a known one that holds "://" (root:p://u:w@tcp(h)/db).
	return keyValues(urls(text, true))
}

// Error returns err with its message passed through Text, nil for nil.
// errors.Is and errors.As see err through it.
func Error(err error, dsns ...string) error {
	if err == nil {
		return nil
	}
	return &redacted{err: err, msg: Text(err.Error(), dsns...)}
}

type redacted struct {
	err error
	msg string
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// userinfo finds the userinfo of every URL in s: after "://", up to the
// last '@' before the next URL (a password may hold '/', '#', '?', '@' and
// "://"). In a text (inText), a URL also ends at a space, so that an '@'
// of the words after it is not taken. fn gets the scheme and the
// userinfo's bounds.
func userinfo(s string, inText bool, fn func(scheme string, from, to int)) {
	for off := 0; ; {
		i := strings.Index(s[off:], "://")
		if i < 0 {
			return
		}
		start := off + i + 3
		rest := s[start:]
		end := nextURL(rest)
		if j := strings.IndexAny(rest[:end], " \t\n"); inText && j >= 0 {
			end = j
		}
		at := strings.LastIndexByte(rest[:end], '@')
		if at < 0 {
			off = start
			continue
		}
		fn(scheme(s[:off+i]), start, start+at)
		off = start + at + 1
	}
}

// nextURL is where the next URL of a list begins in s, len(s) if none: a
// scheme and "://" after a ',', a space or a quote. Another "://" is a
// password's (amqp://u:p://w@host/).
func nextURL(s string) int {
	for off := 0; ; {
		i := strings.Index(s[off:], "://")
		if i < 0 {
			return len(s)
		}
		i += off
		if k := i - len(scheme(s[:i])); k > 0 && k < i && strings.IndexByte(", \t\n\"'`", s[k-1]) >= 0 {
			return k
		}
		off = i + 3
	}
}

// scheme is the scheme that ends s: the letters before "://".
func scheme(s string) string {
	i := len(s)
	for i > 0 && strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.", rune(s[i-1])) {
		i--
	}
	return strings.ToLower(s[i:])
}

// secretAt returns the bounds of the secret in userinfo u: the password
// after the first ':', or with NATS a token that is the whole userinfo;
// ok false when there is none (a user name alone).
func secretAt(scheme, u string) (from int, ok bool) {
	if c := strings.IndexByte(u, ':'); c >= 0 {
		return c + 1, true
	}
	switch scheme {
	case "nats", "tls", "ws", "wss":
		return 0, u != ""
	}
	return 0, false
}

// urls masks the passwords of the URLs in s.
func urls(s string, inText bool) string {
	var b strings.Builder
	last := 0
	userinfo(s, inText, func(scheme string, from, to int) {
		if p, ok := secretAt(scheme, s[from:to]); ok {
			b.WriteString(s[last : from+p])
			b.WriteString(Mask)
			last = to
		}
	})
	b.WriteString(s[last:])
	return b.String()
}

// keyValues masks the password values of key=value pairs in s.
func keyValues(s string) string {
	var b strings.Builder
	last := 0
	passwordValues(s, func(from, to int, _ bool) {
		b.WriteString(s[last:from])
		b.WriteString(Mask)
		last = to
	})
	b.WriteString(s[last:])
	return b.String()
}

// passwordValues calls fn with the bounds of the values of the key=value
// pairs of s whose key ends in "password" in any case (sslpassword too;
// percent-decoded, as pgx decodes a URL's). It reads them as pgconn reads
// a keyword/value DSN: spaces may surround '='; a value is single-quoted
// or runs to a space, with backslash escapes. In a URL's query (query:
// the key follows '?' or '&'), a value runs to '&' or '#' instead.
func passwordValues(s string, fn func(from, to int, query bool)) {
	for off := 0; ; {
		eq := strings.IndexByte(s[off:], '=')
		if eq < 0 {
			return
		}
		eq += off
		off = eq + 1
		// A key is short: looking further back would make a long text's
		// every '=' cost its whole length.
		k := strings.TrimRight(s[max(0, eq-maxKey):eq], spaces)
		raw := k[strings.LastIndexAny(k, spaces+"=?&;,'\"`(")+1:]
		key := raw
		if dec, err := url.QueryUnescape(raw); err == nil {
			key = dec
		}
		if len(key) < len("password") || !strings.EqualFold(key[len(key)-len("password"):], "password") {
			continue
		}
		from := len(s) - len(strings.TrimLeft(s[off:], spaces))
		query := len(k) > len(raw) && strings.IndexByte("?&", k[len(k)-len(raw)-1]) >= 0
		to := from + valueLen(s[from:], query)
		fn(from, to, query)
		off = to
	}
}

// maxKey is how far before a '=' passwordValues looks for its key.
const maxKey = 64

// spaces are the bytes pgconn takes for a space in a keyword/value DSN.
const spaces = " \t\n\r\v\f"

// valueLen is the length of the value that begins s, read as
// passwordValues says.
func valueLen(s string, query bool) int {
	if query {
		if i := strings.IndexAny(s, spaces+"&#"); i >= 0 {
			return i
		}
		return len(s)
	}
	quoted := strings.HasPrefix(s, "'")
	i := 0
	if quoted {
		i = 1
	}
	for ; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case quoted && s[i] == '\'':
			return i + 1
		case !quoted && strings.IndexByte(spaces, s[i]) >= 0:
			return i
		}
	}
	return len(s)
}

// unquote returns the value v of a keyword/value DSN without its quotes,
// and as pgconn reads it: without its backslashes too.
func unquote(v string) (inner, value string) {
	if len(v) > 1 && v[0] == '\'' && v[len(v)-1] == '\'' {
		v = v[1 : len(v)-1]
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' {
			i++
			if i == len(v) {
				break
			}
		}
		b.WriteByte(v[i])
	}
	return v, b.String()
}

// passwords returns the passwords in dsn.
func passwords(dsn string) []string {
	var out []string
	userinfo(dsn, false, func(scheme string, from, to int) {
		if p, ok := secretAt(scheme, dsn[from:to]); ok {
			out = append(out, dsn[from+p:to])
		}
	})
	passwordValues(dsn, func(from, to int, query bool) {
		if query {
			out = append(out, dsn[from:to])
			return
		}
		inner, value := unquote(dsn[from:to])
		out = append(out, inner, value)
	})
	dsn = strings.TrimSpace(dsn)
	if i := strings.Index(dsn, "://"); i < 0 || len(scheme(dsn[:i])) < i {
		// Not a URL (a MySQL password may hold "://"): go-sql-driver's
		// [user[:password]@][net[(addr)]]/dbname, split as its ParseDSN
		// does: at the last '/', then the last '@' before it. Without a
		// "/dbname", at the last '@': the driver's error names what precedes
		// a '/' of the password as the network.
		at := strings.LastIndexByte(dsn[:max(strings.LastIndexByte(dsn, '/'), 0)], '@')
		if at < 0 {
			at = strings.LastIndexByte(dsn, '@')
		}
		if c := strings.IndexByte(dsn[:max(at, 0)], ':'); c >= 0 {
			out = append(out, dsn[c+1:at])
		}
	}
	return out
}

// forms are the ways p may be written in an error: as is, percent-decoded,
// Go-quoted (url.Error quotes the URL), and, when it holds spaces, its
// words (a best-effort redaction by another may have cut it there). Its
// beginning up to a '/', '?' or '#' is one too: url.Parse takes the
// host's end, or the fragment's start, there and says "invalid port".
func forms(p string) []string {
	out := []string{p}
	if i := strings.IndexAny(p, "/?#"); i > 0 {
		out = append(out, p[:i])
	}
	if u, err := url.PathUnescape(p); err == nil {
		out = append(out, u)
	}
	if u, err := url.QueryUnescape(p); err == nil {
		out = append(out, u)
	}
	for _, f := range out[:len(out):len(out)] {
		q := strconv.Quote(f)
		out = append(out, q[1:len(q)-1])
		if strings.ContainsAny(f, " \t\n") {
			out = append(out, strings.Fields(f)...)
		}
	}
	return out
}
