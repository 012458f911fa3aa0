package rabbitmq_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/broker/rabbitmq"
)

// TestURLPasswordNotInErrors: the errors of NewSource, Declare and
// NewPublisher do not hold the URL's password, whether the URL parses
// (url.Parse's own error repeats it whole) or not, and whether the
// broker is reached or not. Given in URLs after another node's URL, no
// password of either is in the error that lists both failures.
func TestURLPasswordNotInErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		secrets   []string
	}{
		{"parses, nobody listens", "amqp://app:Sup3rS3cret@127.0.0.1:1/", []string{"Sup3rS3cret"}},
		{"parses, wrong password", "amqp://guest:Wr0ngPassw0rd@127.0.0.1:5672/", []string{"Wr0ngPassw0rd"}},
		{"does not parse: /", "amqp://app:Sup3r/S3cret@rabbit.internal:5672/", []string{"Sup3r/S3cret", "Sup3r", "S3cret"}},
		{"does not parse: #", "amqp://app:Sup3r#S3cret@rabbit.internal:5672/", []string{"Sup3r#S3cret", "Sup3r", "S3cret"}},
		{"does not parse: ?", "amqp://app:Sup3r?S3cret@rabbit.internal:5672/", []string{"Sup3r?S3cret", "Sup3r", "S3cret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const other = "amqp://other:An0therS3cret@127.0.0.1:1/"
			urls := []string{other, tc.url}
			secrets := append([]string{"An0therS3cret"}, tc.secrets...)
			for _, call := range []struct {
				name string
				fn   func() error
			}{
				{"NewSource", func() error {
					_, err := rabbitmq.NewSource(ctx, &rabbitmq.Config{URL: tc.url, Queue: "redact-test"})
					return err
				}},
				{"Declare", func() error { return rabbitmq.Declare(ctx, &rabbitmq.Config{URL: tc.url, Queue: "redact-test"}) }},
				{"NewPublisher", func() error {
					_, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: tc.url})
					return err
				}},
				{"NewSource with URLs", func() error {
					_, err := rabbitmq.NewSource(ctx, &rabbitmq.Config{URLs: urls, Queue: "redact-test"})
					return err
				}},
				{"Declare with URLs", func() error { return rabbitmq.Declare(ctx, &rabbitmq.Config{URLs: urls, Queue: "redact-test"}) }},
				{"NewPublisher with URLs", func() error {
					_, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URLs: urls})
					return err
				}},
			} {
				err := call.fn()
				if err == nil {
					t.Fatalf("%s(%s): no error", call.name, tc.url)
				}
				for _, s := range secrets {
					if strings.Contains(err.Error(), s) {
						t.Errorf("%s: the error holds the password (%q): %v", call.name, s, err)
					}
				}
			}
		})
	}
}
