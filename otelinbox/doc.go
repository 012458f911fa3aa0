// Package otelinbox records OpenTelemetry metrics and traces of an inbox,
// its pruner, an outbox and its relay, through their hooks. Package inbox
// does not import it: a program that does not import otelinbox links no
// OpenTelemetry code.
//
// Wiring: one *Hooks serves every role.
//
//	hooks, err := otelinbox.New(nil) // the global providers
//	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing", Hooks: []any{hooks}})
//	pruner, err := inbox.NewPruner(driver, &inbox.PrunerConfig{Hooks: []any{hooks}})
//	ob, err := outbox.New(ctx, driver, &outbox.Config{Hooks: []any{hooks}})
//	relay, err := outbox.NewRelay(ctx, driver, &outbox.RelayConfig{Publish: outbox.ToBroker(pub), Hooks: []any{hooks}})
//
// # Traces
//
// A trace runs producer → relay → broker → consumer:
//
//   - outbox Write (WriteHook): the trace context of Write's ctx (the
//     writer's span) is written into the message's headers, W3C
//     traceparent and tracestate by default (Config.Propagator), and
//     stored with the row.
//   - relay (PublishHook): a span "send <destination>" of kind Producer,
//     a child of the context in the row's headers, around each Publish; its
//     own context replaces the headers' before Publish, and its status is
//     an error when Publish failed. Attributes: messaging.operation.type
//     and messaging.operation.name "send", messaging.destination.name,
//     messaging.message.id.
//   - consumer (StartHook and the outcome hooks): a span "process
//     <subject>" (or "process" without one) of kind Consumer per message
//     and per attempt, a child of the context in the message's headers
//     with a link to ctx's span when there is one (else a child of ctx's
//     span), started before the claim and ended with the outcome; the
//     handler's ctx carries it. Attributes:
//     messaging.operation.type and messaging.operation.name "process",
//     messaging.consumer.group.name (the inbox's consumer),
//     messaging.message.id (quoted when not valid UTF-8),
//     messaging.system (inbox.Message.System: nats, kafka, rabbitmq,
//     aws_sqs) and messaging.destination.name (inbox.Message.Subject) when
//     known, inbox.message.type when set, inbox.outcome, inbox.attempts
//     after a handler failure, inbox.fingerprint_conflict with an event
//     when an ID came back with another payload. Retry and dead_lettered
//     set an error status and record the error.
//
// # Metrics
//
// Every metric of a message has the attributes
// messaging.consumer.group.name (the consumer), inbox.outcome (processed,
// duplicate, retry, dead_lettered; not on inbox.fingerprint_conflicts)
// and, when known, messaging.system. The destination is left out of
// metrics: a subject per customer or order would make a series of each.
//
//	inbox.messages              counter, {message}: outcomes, one per message and attempt;
//	                            their sum is the number of outcomes.
//	inbox.fingerprint_conflicts counter, {message}: duplicates whose payload differs from
//	                            the one first processed under their ID (a producer reused
//	                            an ID); each is also counted in inbox.messages as duplicate.
//	inbox.process.duration      histogram, s: the whole Process call, claim, handler and
//	                            COMMIT included (a batch's messages: the batch's).
//	inbox.handler.duration      histogram, s: the handler alone, when it ran alone
//	                            (Process, ProcessTx, ProcessQueued, Replay; not batches).
//	inbox.end_to_end.duration   histogram, s: from the message's publication, as the broker
//	                            says (inbox.Message.Time), to its outcome; only when known.
//	inbox.attempts              histogram, {attempt}: the failed attempts recorded for a
//	                            message, at each retry and dead letter after a handler failure.
//	inbox.in_flight             up-down counter, {message}: messages between OnStart and
//	                            their outcome; attribute messaging.consumer.group.name only.
//	inbox.pruned                counter, {row}: inbox rows the pruner deleted; attribute
//	                            inbox.prune.failed (true for a Prune call that failed part way).
//	inbox.batch.splits          counter, {batch}: batches of Consume or ConsumeBatch rolled
//	                            back after a lock conflict and run again in smaller parts;
//	                            attribute messaging.consumer.group.name only. A rate that
//	                            stays above zero: handlers that lock shared rows in no
//	                            stable order.
//
// The instrumentation scope is ScopeName for both the meter and the
// tracer.
package otelinbox
