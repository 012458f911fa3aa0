// Package idempotency makes HTTP requests safe to retry with an
// Idempotency-Key header. It is the inbox's guarantee for an API.
//
// A client that retries a POST after a timeout is a broker that
// redelivers: the same request arrives twice. With a key, the second
// arrival gets the first one's response, and the handler's writes commit
// once.
//
// # How it works
//
// [Middleware] opens a transaction and inserts the request's key into the
// idempotency_keys table:
//
//	INSERT ... ON CONFLICT DO NOTHING
//
// MySQL's statement is ON DUPLICATE KEY UPDATE. The table's primary key is
// the guard. A new key runs the handler in the
// same transaction. The handler writes its response as usual. The
// middleware holds it, stores it in the key's row, and commits. Only then
// does the response go out. So the writes, the key and the stored response
// commit together, or not at all.
//
// A request whose key is stored gets the stored response: its status, the
// header fields named in [Config.StoredHeaders], and its body. It carries
// the header field "Idempotent-Replayed: true" ([ReplayedHeader]).
//
// # What the client gets
//
// The rules follow the IETF draft draft-ietf-httpapi-idempotency-key-header.
// Each error is sent as application/problem+json, a [Problem] with a code.
//
//   - 400: the key is missing where the route requires one, or it is not a
//     Structured Field string ("..."), or it is empty or too long.
//   - 409: a request with the same key is still running. Retry-After says
//     when to try again. [Config.Wait] lets a request wait a while instead.
//   - 422: the key came before with another request: another path, query,
//     body or fingerprinted header field. A key is scoped by the method and
//     the route, so another method or route makes it a new key.
//   - 413: the body is over [Config.MaxRequestBytes].
//
// # What is stored, and what rolls back
//
// A handler that fails rolls back its writes and the key, so that the
// client may retry: a [HandlerFunc]'s error, a panic, a 5xx, 408, 425 or
// 429. A response over [Config.MaxResponseBytes] rolls back too, and the
// client gets 500. A 4xx that the handler chose is stored like a success,
// unless [Config.ForgetClientErrors] is set.
//
// A handler that finishes after its client left still commits: its
// client's retry then gets the response. A handler that watches its
// request's context fails instead, and the retry runs it again.
//
// # Scope and expiry
//
// A key belongs to a scope: the principal ([Config.Principal]), the method
// and the route. Two clients cannot see each other's responses, whatever
// keys they send. Keys are kept at least [Config.Expiry], 24 hours by
// default. [Middleware.Pruner] deletes them afterwards. Publish that
// window in the API's documentation.
//
// # Use
//
// Make a Middleware on a store driver, then wrap each route that needs it:
//
//	keys, err := idempotency.New(ctx, driver, &idempotency.Config{Principal: accountID})
//	mux.Handle("POST /charges", keys.Handle(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) error {
//		// Write with tx. The response goes out after the commit.
//	}))
//
// [Middleware.Wrap] takes a plain http.Handler, which finds the
// transaction with [FromContext].
package idempotency
