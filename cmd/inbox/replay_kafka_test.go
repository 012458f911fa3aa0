package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/testenv"
)

// selfSigned makes a certificate for 127.0.0.1 and writes it, as PEM, to
// a file it returns with the server's TLS configuration.
func selfSigned(t *testing.T) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kfake"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, file
}

// TestReplayKafkaTLSSASL replays to a Kafka cluster that takes TLS and
// SASL/SCRAM alone: with -kafka-ca and -kafka-sasl, and the credentials
// from the environment, the copy arrives; a wrong password or no TLS
// changes nothing, and no output shows the password.
func TestReplayKafkaTLSSASL(t *testing.T) {
	const user, pass = "replayer", "s3cret-kafka-pw"
	topic := testenv.Name("cmdsec_")
	serverTLS, caFile := selfSigned(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.TLS(serverTLS),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", user, pass))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := strings.Join(c.ListenAddrs(), ",")

	e := openDB(t, "sqlite")
	ib := e.inbox(t, inbox.Config{Consumer: "sec"})
	dl := deadLetterOf(t, e, ib, inbox.Message{ID: "k-1", Type: "t", Payload: []byte("over tls")})
	replay := func(password string, extra ...string) (int, string, string) {
		t.Setenv(envKafkaUser, user)
		t.Setenv(envKafkaPassword, password)
		args := append([]string{"dead-letters", "replay", "-consumer", "sec", "-kafka", addr, "-topic", topic, "-timeout", "2s"}, extra...)
		return runCmd(t, append(append(args, e.flags...), fmt.Sprint(dl))...)
	}

	for _, tc := range []struct {
		name, password string
		flags          []string
	}{
		{"a wrong password", "wrong-pw-123", []string{"-kafka-ca", caFile, "-kafka-sasl", "scram-sha-256"}},
		{"no TLS", pass, []string{"-kafka-sasl", "scram-sha-256"}},
		{"no SASL", pass, []string{"-kafka-ca", caFile}},
	} {
		code, stdout, stderr := replay(tc.password, tc.flags...)
		if code == 0 || strings.Contains(stdout+stderr, pass) || strings.Contains(stdout+stderr, "wrong-pw-123") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want a failure that shows no password", tc.name, code, stdout, stderr)
		}
		t.Logf("%s: exit %d: %s", tc.name, code, stderr)
		wantDeadRow(t, e, dl, tc.name)
	}
	if code, stdout, stderr := replay(pass, "-kafka-sasl", "scram-sha-256", "-kafka-tls"); code == 0 {
		t.Errorf("system roots for a self-signed certificate: exit %d, %q %q; want a failure", code, stdout, stderr)
	}
	if code, _, stderr := replay(pass, "-kafka-sasl", "kerberos"); code != exitUsage || !strings.Contains(stderr, "scram-sha-512") {
		t.Errorf("-kafka-sasl kerberos: exit %d, %q; want usage", code, stderr)
	}

	code, stdout, stderr := replay(pass, "-kafka-ca", caFile, "-kafka-sasl", "scram-sha-256")
	if code != 0 || !strings.Contains(stdout, "replayed dead letter") {
		t.Fatalf("replay over TLS and SASL: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.DialTLSConfig(&tls.Config{RootCAs: certPool(t, caFile), MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fetches := cl.PollFetches(ctx)
	if err := fetches.Err(); err != nil {
		t.Fatal(err)
	}
	recs := fetches.Records()
	var id string
	for _, h := range recs[0].Headers {
		if h.Key == broker.DefaultIDHeader {
			id = string(h.Value)
		}
	}
	if len(recs) != 1 || id != "k-1" || string(recs[0].Value) != "over tls" {
		t.Fatalf("the topic holds %d records, the first with ID %q; want k-1 alone", len(recs), id)
	}
}

func certPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b)
	return p
}
