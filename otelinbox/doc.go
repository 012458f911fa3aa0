// Package otelinbox records OpenTelemetry metrics and traces through the
// hooks of an inbox, its pruner, an outbox and its relay.
//
// Package inbox does not import otelinbox. A program that does not import
// it links no OpenTelemetry code. One [*Hooks] serves every role.
//
//	hooks, err := otelinbox.New(nil) // the global providers
//	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing", Hooks: []inbox.Hook{hooks}})
//	pruner, err := inbox.NewPruner(driver, &inbox.PrunerConfig{Hooks: []inbox.Hook{hooks}})
//	ob, err := outbox.New(ctx, driver, &outbox.Config{Hooks: []outbox.Hook{hooks}})
//	relay, err := outbox.NewRelay(ctx, driver, &outbox.RelayConfig{Publish: outbox.ToBroker(pub), Hooks: []outbox.Hook{hooks}})
//
// # Traces
//
// A trace runs from the producer through the relay and the broker to the
// consumer.
//
// At the outbox's Write, [Hooks.OnWrite] writes the trace context of
// Write's ctx into the message's headers. That is the writer's span. By
// default it goes as W3C traceparent and tracestate, as
// [Config.Propagator] tells. It is stored with the row.
//
// At the relay, [Hooks.OnPublish] makes a span "send <destination>" of kind
// Producer around each Publish. It is a child of the context in the row's
// headers. Its own context replaces the headers' before Publish. Its status
// is an error when Publish failed. Its attributes are
// messaging.operation.type and messaging.operation.name "send",
// messaging.destination.name and messaging.message.id.
//
// At the consumer, [Hooks.OnStart] and the outcome hooks make a span of
// kind Consumer per message and per attempt. Its name is "process
// <subject>", or "process" without a subject. It is a child of the context
// in the message's headers, with a link to ctx's span when there is one.
// Without a context in the headers, it is a child of ctx's span. It starts
// before the claim and ends with the outcome. The handler's ctx carries it.
// Retry and dead_lettered set an error status and record the error. Its
// attributes are these.
//   - messaging.operation.type and messaging.operation.name "process".
//   - messaging.consumer.group.name, the inbox's consumer.
//   - messaging.message.id, quoted when not valid UTF-8.
//   - messaging.system, when known, from inbox.Message.System. Examples are
//     nats, kafka, rabbitmq and aws_sqs.
//   - messaging.destination.name, when known, from inbox.Message.Subject.
//   - inbox.message.type, when set.
//   - inbox.outcome.
//   - inbox.attempts, after a handler failure.
//   - inbox.fingerprint_conflict, with an event, when an ID came back with
//     another payload.
//
// # Metrics
//
// Every metric of a message has the attribute messaging.consumer.group.name,
// the consumer. It has messaging.system when known. All but
// inbox.fingerprint_conflicts have inbox.outcome. Its values are processed,
// duplicate, retry and dead_lettered. The destination is left out of
// metrics. A subject per customer or order would make a series of each.
//
// The metrics are these.
//   - inbox.messages is a counter of outcomes, in {message}. It counts one
//     per message and attempt. Their sum is the number of outcomes.
//   - inbox.fingerprint_conflicts is a counter of duplicates, in {message},
//     whose payload differs from the one first processed under their ID. A
//     producer reused an ID. Each is also counted in inbox.messages as
//     duplicate.
//   - inbox.process.duration is a histogram, in s, of the whole Process
//     call. It includes the claim, the handler and COMMIT. A batch's
//     messages get the batch's duration.
//   - inbox.handler.duration is a histogram, in s, of the handler alone. It
//     is recorded when the handler ran alone, in Process, ProcessTx,
//     ProcessQueued and Replay, and not for batches.
//   - inbox.end_to_end.duration is a histogram, in s, from the message's
//     publication to its outcome. The publication time is the broker's
//     inbox.Message.Time, and the metric is recorded only when it is known.
//   - inbox.attempts is a histogram, in {attempt}, of the failed attempts
//     recorded for a message. It is recorded at each retry and dead letter
//     after a handler failure.
//   - inbox.in_flight is an up-down counter, in {message}, of the messages
//     between OnStart and their outcome. Its only attribute is
//     messaging.consumer.group.name.
//   - inbox.pruned is a counter, in {row}, of the inbox rows the pruner
//     deleted. Its attribute inbox.prune.failed is true for a Prune call that
//     failed part way.
//   - inbox.batch.splits is a counter, in {batch}, of the batches of Consume
//     or ConsumeBatch rolled back after a lock conflict and run again in
//     smaller parts. Its only attribute is messaging.consumer.group.name. A
//     rate that stays above zero points to handlers that lock shared rows in
//     no stable order.
//
// The instrumentation scope is ScopeName for both the meter and the
// tracer.
package otelinbox
