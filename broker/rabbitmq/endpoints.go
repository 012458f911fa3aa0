package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// endpoints are the URLs that a Source or a Publisher connects to, in
// turn. It is safe for concurrent use.
type endpoints struct {
	urls []string
	mu   sync.Mutex
	last int // the index of the last connection's URL; -1 before the first
}

// urlList returns the URLs that url and urls configure, as the doc of
// Config.URLs tells. field names the struct in errors.
func urlList(field, url string, urls []string) ([]string, error) {
	switch {
	case url != "" && len(urls) > 0:
		return nil, fmt.Errorf("%w: %s.URL and %s.URLs are both set: set one", ErrInvalidConfig, field, field)
	case len(urls) == 0 && url == "":
		return []string{DefaultURL}, nil
	case len(urls) == 0:
		return []string{url}, nil
	}
	for i, u := range urls {
		if u == "" {
			return nil, fmt.Errorf("%w: %s.URLs[%d] is empty", ErrInvalidConfig, field, i)
		}
	}
	return append([]string(nil), urls...), nil
}

func newEndpoints(urls []string) *endpoints { return &endpoints{urls: urls, last: -1} }

// dial connects to the first URL that answers. It starts with the one
// after the last connection's, so that a lost node is tried last, and
// wraps around. The error holds each URL's, passwords masked.
func (e *endpoints) dial(ctx context.Context, cfg amqp.Config, name string) (*amqp.Connection, error) {
	e.mu.Lock()
	start := e.last + 1
	e.mu.Unlock()
	var errs []error
	for k := range len(e.urls) {
		i := (start + k) % len(e.urls)
		conn, err := dial(ctx, e.urls[i], cfg, name)
		if err == nil {
			e.mu.Lock()
			e.last = i
			e.mu.Unlock()
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, fmt.Errorf("rabbitmq: none of %d URLs answered: %w", len(e.urls), errors.Join(errs...))
}
