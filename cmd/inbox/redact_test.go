package main

import (
	"strings"
	"testing"
)

// TestSecretsNotPrinted runs the command with every flag that takes a URL
// or a DSN, each with a password, on a broker or database it cannot use
// (nobody listens, the URL does not parse): the password is in neither
// stdout nor stderr, and the failure is still told.
func TestSecretsNotPrinted(t *testing.T) {
	t.Parallel()
	e := openDB(t, "sqlite")
	replay := func(broker ...string) []string { // the broker's URL flag and value: its destination is added
		dest := map[string][]string{"-nats": {"-subject", "s"}, "-amqp": {"-routing-key", "q"}}[broker[0]]
		return append(append(append([]string{"dead-letters", "replay", "-consumer", "c"}, dest...), broker...), append(e.flags, "1")...)
	}
	check := func(broker ...string) []string { return append(append([]string{"check"}, broker...), e.flags...) }
	for _, tc := range []struct {
		name    string
		args    []string
		secrets []string
	}{
		{"check, NATS URL", check("-nats", "nats://alice:S3cretNats@127.0.0.1:1", "-stream", "S"), []string{"S3cretNats"}},
		{"check, NATS URL that does not parse", check("-nats", "nats://alice:S3c/retNats@127.0.0.1:1", "-stream", "S"), []string{"S3c/retNats", "S3c"}},
		{"check, NATS list", check("-nats", "nats://a:P1ssA@127.0.0.1:1,nats://b:Q2ssB@127.0.0.1:2", "-stream", "S"), []string{"P1ssA", "Q2ssB"}},
		{"check, NATS token", check("-nats", "nats://S3cretToken@127.0.0.1:1", "-stream", "S"), []string{"S3cretToken"}},
		{"check, AMQP URL that parses", check("-amqp", "amqp://app:Sup3rS3cret@127.0.0.1:1/", "-queue", "q"), []string{"Sup3rS3cret"}},
		{"check, AMQP URL that does not parse", check("-amqp", "amqp://app:Sup3r/S3cret@rabbit.internal:5672/", "-queue", "q"),
			[]string{"Sup3r/S3cret", "Sup3r", "S3cret"}},
		{"replay, NATS URL", replay("-nats", "nats://alice:S3cretNats@127.0.0.1:1"), []string{"S3cretNats"}},
		{"replay, NATS list", replay("-nats", "nats://a:P1ssA@127.0.0.1:1,nats://b:Q2ssB@127.0.0.1:2"), []string{"P1ssA", "Q2ssB"}},
		{"replay, AMQP URL that parses", replay("-amqp", "amqp://app:Sup3rS3cret@127.0.0.1:1/"), []string{"Sup3rS3cret"}},
		{"replay, AMQP URL that does not parse", replay("-amqp", "amqp://app:Sup3r#S3cret@rabbit.internal:5672/"), []string{"Sup3r", "S3cret"}},
		{"postgres URL", []string{"stats", "-postgres", "postgres://postgres:S3cretPg@127.0.0.1:1/test"}, []string{"S3cretPg"}},
		{"postgres URL that does not parse", []string{"stats", "-postgres", "postgres://postgres:S3c:r/etPg@127.0.0.1:x/test"}, []string{"S3c:r/etPg", "r/etPg"}},
		{"postgres key=value", []string{"stats", "-postgres", "host=127.0.0.1 port=1 user=app password=S3cretKV"}, []string{"S3cretKV"}},
		{"postgres key = value", []string{"stats", "-postgres", "host=127.0.0.1 port=abc user=u password = Spaced0ut dbname=x"}, []string{"Spaced0ut"}},
		{"postgres key= value", []string{"stats", "-postgres", "host=127.0.0.1 port=abc user=u password= Spaced0ut dbname=x"}, []string{"Spaced0ut"}},
		{"check, AMQP URL with :// in the password", check("-amqp", "amqp://app:S3c://r3t@127.0.0.1:1/", "-queue", "q"), []string{"S3c://r3t", "r3t"}},
		{"MySQL DSN with :// in the password", []string{"stats", "-mysql", "root:S3c://r3t@tcp(127.0.0.1:1)/test"}, []string{"S3c://r3t", "r3t"}},
		{"postgres key=value that does not parse", []string{"stats", "-postgres", `host=127.0.0.1 port=x password='S3cret\' K3y'`}, []string{"S3cret", "K3y"}},
		{"MySQL DSN", []string{"stats", "-mysql", "root:S3cretMy@tcp(127.0.0.1:1)/test"}, []string{"S3cretMy"}},
		{"MySQL DSN without a database, / in the password", []string{"stats", "-mysql", "root:S3cret/x@tcp(127.0.0.1:1)"}, []string{"S3cret"}},
		{"MySQL DSN that does not parse", []string{"stats", "-mysql", "root:S3c/r@tMy@tcp(127.0.0.1:1/test"}, []string{"S3c/r@tMy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, tc.args...)
			if code != exitFailure || stderr == "" {
				t.Errorf("%v: exit %d, stderr %q; want 1 and the failure told", tc.args, code, stderr)
			}
			for _, s := range tc.secrets {
				if strings.Contains(stdout+stderr, s) {
					t.Errorf("%v: the output holds the password (%q):\nstdout: %s\nstderr: %s", tc.args, s, stdout, stderr)
				}
			}
		})
	}
}
