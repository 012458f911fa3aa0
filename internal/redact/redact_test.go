package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"testing"
)

// parseError is url.Parse's error for s, which repeats s whole, or a
// stand-in when s parses.
func parseError(s string) string {
	if _, err := url.Parse(s); err != nil {
		return "rabbitmq: connect: " + err.Error()
	}
	return "connecting to NATS at " + s + ": nats: no servers available for connection"
}

func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, dsn string
		text      string // the error; "" is parseError(dsn)
		secrets   []string
		want      string // DSN(dsn)
	}{
		{name: "NATS URL", dsn: "nats://alice:S3cretNats@127.0.0.1:1", secrets: []string{"S3cretNats"},
			want: "nats://alice:xxxxx@127.0.0.1:1"},
		{name: "NATS token", dsn: "nats://S3cretToken@127.0.0.1:4222", secrets: []string{"S3cretToken"},
			want: "nats://xxxxx@127.0.0.1:4222"},
		{name: "NATS list", dsn: "nats://a:P1ssA@h1:4222,nats://b:Q2ssB@h2:4222", secrets: []string{"P1ssA", "Q2ssB"},
			want: "nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:4222"},
		{name: "NATS URL that does not parse", dsn: "nats://alice:S3c/retNats@127.0.0.1:1", secrets: []string{"S3c/retNats", "S3c"},
			want: "nats://alice:xxxxx@127.0.0.1:1"},
		{name: "AMQP URL that parses", dsn: "amqp://app:Sup3rS3cret@rabbit.internal:5672/vh", secrets: []string{"Sup3rS3cret"},
			want: "amqp://app:xxxxx@rabbit.internal:5672/vh"},
		{name: "AMQP URL that parses, percent-encoded", dsn: "amqp://app:Sup3r%2FS3cret@rabbit.internal:5672/",
			text: "dial amqp://app:Sup3r/S3cret@rabbit.internal:5672/ failed", secrets: []string{"Sup3r/S3cret"},
			want: "amqp://app:xxxxx@rabbit.internal:5672/"},
		{name: "AMQP URL that does not parse", dsn: "amqp://app:Sup3r/S3cret@rabbit.internal:5672/", secrets: []string{"Sup3r/S3cret", "Sup3r"},
			want: "amqp://app:xxxxx@rabbit.internal:5672/"},
		{name: "AMQP URL with # ? @ in the password", dsn: "amqps://app:S3c#b?c@d@rabbit.internal/", secrets: []string{"S3c"},
			want: "amqps://app:xxxxx@rabbit.internal/"},
		{name: "AMQP URL, one letter before #", dsn: "amqps://app:a#b?c@d@rabbit.internal/", secrets: []string{`:a"`},
			want: "amqps://app:xxxxx@rabbit.internal/"},
		{name: "AMQP URL, a quote in the password", dsn: `amqp://app:S3cr"et@h/`, secrets: []string{`S3cr\"et`},
			want: "amqp://app:xxxxx@h/"},
		{name: "user alone", dsn: "amqp://guest@h/", text: "amqp://guest@h/ refused", want: "amqp://guest@h/"},
		{name: "postgres URL", dsn: "postgres://postgres:S3cretPg@127.0.0.1:5432/test?sslmode=disable", secrets: []string{"S3cretPg"},
			want: "postgres://postgres:xxxxx@127.0.0.1:5432/test?sslmode=disable"},
		{name: "postgres URL, password parameter", dsn: "postgres://u@h/db?password=S3cretQ&sslmode=disable",
			text: "cannot parse `postgres://u@h/db?password=S3cretQ&sslmode=disable`", secrets: []string{"S3cretQ"},
			want: "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{name: "postgres key=value", dsn: "host=127.0.0.1 user=app password=S3cretKV dbname=test",
			text: "failed: host=127.0.0.1 user=app password=S3cretKV dbname=test", secrets: []string{"S3cretKV"},
			want: "host=127.0.0.1 user=app password=xxxxx dbname=test"},
		{name: "postgres key=value, quoted", dsn: `host=h password='S3cret \' K3y' port=x`,
			// pgconn's own best effort cuts the value at the escaped quote.
			text: "cannot parse `host=h password=xxxxx K3y' port=x`: invalid port", secrets: []string{"K3y"},
			want: "host=h password=xxxxx port=x"},
		{name: "MySQL DSN", dsn: "root:S3cretMy@tcp(127.0.0.1:3306)/test?parseTime=true",
			text: "Open root:S3cretMy@tcp(127.0.0.1:3306)/test: refused", secrets: []string{"S3cretMy"},
			want: "root:xxxxx@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{name: "MySQL DSN, / and @ in the password", dsn: "root:S3c/r@t@tcp(127.0.0.1:3306)/test",
			text: "Open root:S3c/r@t@tcp(127.0.0.1:3306)/test: refused", secrets: []string{"S3c/r@t"},
			want: "root:xxxxx@tcp(127.0.0.1:3306)/test"},
		{name: "MySQL DSN, : and @ in the password", dsn: "root:S3:c@r@tcp(127.0.0.1:3306)/test",
			text: "Open root:S3:c@r@tcp(127.0.0.1:3306)/test: refused", secrets: []string{"S3:c@r"},
			want: "root:xxxxx@tcp(127.0.0.1:3306)/test"},
		{name: "MySQL DSN, :// in the password", dsn: "root:S3c://r3t@tcp(127.0.0.1:3306)/test",
			text: "Open root:S3c://r3t@tcp(127.0.0.1:3306)/test: refused", secrets: []string{"S3c://r3t", "r3t"},
			want: "root:xxxxx@tcp(127.0.0.1:3306)/test"},
		{name: "MySQL DSN, :// and : in the password", dsn: "root:S3c://u:r3t@tcp(127.0.0.1:3306)/test",
			text: "Open root:S3c://u:r3t@tcp(127.0.0.1:3306)/test: refused", secrets: []string{"S3c://u:r3t", "S3c"},
			want: "root:xxxxx@tcp(127.0.0.1:3306)/test"},
		{name: "MySQL DSN without a database, / in the password", dsn: "root:S3cret/x@tcp(127.0.0.1:3306)",
			// go-sql-driver takes what precedes the password's '/' for the network.
			text: "Open: default addr for network 'root:S3cret' unknown", secrets: []string{"S3cret"},
			want: "root:xxxxx@tcp(127.0.0.1:3306)"},
		{name: "AMQP URL, :// in the password", dsn: "amqp://u:S3c://r3t@host:5672/", secrets: []string{"S3c://r3t", "r3t"},
			want: "amqp://u:xxxxx@host:5672/"},
		{name: "NATS list, a space after the comma", dsn: "nats://u:P1ssA@h1:4222, nats://v:Q2ssB@h2:4222", secrets: []string{"P1ssA", "Q2ssB"},
			want: "nats://u:xxxxx@h1:4222, nats://v:xxxxx@h2:4222"},
		{name: "postgres URL, percent-encoded password parameter", dsn: "postgres://u@h/db?pass%77ord=S3cretQ&sslmode=disable",
			text: "cannot parse `postgres://u@h/db?pass%77ord=S3cretQ&sslmode=disable`", secrets: []string{"S3cretQ"},
			want: "postgres://u@h/db?pass%77ord=xxxxx&sslmode=disable"},
		{name: "postgres key = value", dsn: "host=127.0.0.1 port=abc user=u password = Spaced0ut dbname=x",
			text: "cannot parse `host=127.0.0.1 port=abc user=u password = Spaced0ut dbname=x`: invalid port", secrets: []string{"Spaced0ut"},
			want: "host=127.0.0.1 port=abc user=u password = xxxxx dbname=x"},
		{name: "postgres key= value", dsn: "host=h port=x password= Spaced0ut",
			// pgconn's best effort masks the empty word after '='.
			text: "cannot parse `host=h port=x password=xxxxx Spaced0ut`: invalid port", secrets: []string{"Spaced0ut"},
			want: "host=h port=x password= xxxxx"},
		{name: "postgres key =value, sslpassword", dsn: "host=h port=x sslpassword =Spaced0ut",
			text: "cannot parse `host=h port=x sslpassword =Spaced0ut`: invalid port", secrets: []string{"Spaced0ut"},
			want: "host=h port=x sslpassword =xxxxx"},
		{name: "postgres key=value, escaped space", dsn: `host=h port=x password=S3c\ r3t`,
			text: "cannot parse `host=h port=x password=xxxxx r3t`: invalid port", secrets: []string{"r3t"},
			want: "host=h port=x password=xxxxx"},
		{name: "postgres key=value, escaped quote", dsn: `host=h port=x password=S3c\'r3t`,
			text: "login as S3c'r3t failed", secrets: []string{"S3c'r3t"},
			want: "host=h port=x password=xxxxx"},
		{name: "postgres key=value, & in the password", dsn: "host=h port=x password=S3c&r3t",
			text: "cannot parse `host=h port=x password=S3c&r3t`: invalid port", secrets: []string{"S3c&r3t", "r3t"},
			want: "host=h port=x password=xxxxx"},
		{name: "postgres key=value, upper case", dsn: "host=h port=x PASSWORD = 'a b c' dbname=d",
			text: "cannot parse `host=h port=x PASSWORD = 'a b c' dbname=d`: invalid port", secrets: []string{"a b c"},
			want: "host=h port=x PASSWORD = xxxxx dbname=d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			text := tc.text
			if text == "" {
				text = parseError(tc.dsn)
			}
			for _, s := range tc.secrets {
				if !strings.Contains(text, s) {
					t.Fatalf("the test's error %q lacks %q: it tests nothing", text, s)
				}
			}
			err := Error(fmt.Errorf("wrapped: %w", errors.New(text)), tc.dsn)
			for _, s := range tc.secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("Error: %q holds the password %q", err, s)
				}
			}
			if len(tc.secrets) > 0 && !strings.Contains(err.Error(), Mask) {
				t.Errorf("Error: %q, want the password replaced by %s", err, Mask)
			}
			if got := DSN(tc.dsn); got != tc.want {
				t.Errorf("DSN(%q) = %q, want %q", tc.dsn, got, tc.want)
			}
		})
	}
}

// TestTextWithoutDSN: a URL's password in a text is masked even when the
// DSN is not known (a log line of another), and nothing else changes.
func TestTextWithoutDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, want string }{
		{`parse "amqp://app:Sup3r/S3cret@rabbit.internal:5672/": invalid port ":Sup3r" after host`,
			`parse "amqp://app:xxxxx@rabbit.internal:5672/": invalid port ":Sup3r" after host`},
		{"at nats://a:p@h1,nats://b:q@h2: refused", "at nats://a:xxxxx@h1,nats://b:xxxxx@h2: refused"},
		{"nats://h:4222: Access denied for user 'root'@'localhost'", "nats://h:4222: Access denied for user 'root'@'localhost'"},
		{"no URL: user@host, a:b", "no URL: user@host, a:b"},
		{"dsn password='it''s' x", "dsn password=xxxxx's' x"},
		{"cannot parse `host=h password = Spaced0ut dbname=x`: invalid port", "cannot parse `host=h password = xxxxx dbname=x`: invalid port"},
		{"dial amqp://u:S3c://r3t@host:5672/: refused", "dial amqp://u:xxxxx@host:5672/: refused"},
		{`urls "amqp://a:p@h1","amqp://b:q@h2"`, `urls "amqp://a:xxxxx@h1","amqp://b:xxxxx@h2"`},
		{"passfile=/home/u/.pgpass password=S3cret", "passfile=/home/u/.pgpass password=xxxxx"},
	} {
		if got := Text(tc.text); got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
	if Error(nil, "x") != nil {
		t.Error("Error(nil) is not nil")
	}
	if err := Error(fmt.Errorf("x: %w", fs.ErrNotExist), "nats://a:b@c"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is does not see through Error: %v", err)
	}
}
