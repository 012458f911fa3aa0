package storetest

import (
	"context"
	"testing"

	"github.com/inboxkit/inbox"
)

// Run runs the conformance suite against the store that h opens.
func Run[TTx any](t *testing.T, h Harness[TTx]) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness[TTx])
	}{
		// claim.go: claims, duplicates, IDs
		{"ClaimThenDuplicate", testClaimThenDuplicate[TTx]},
		{"HandlerErrorRollsBack", testHandlerErrorRollsBack[TTx]},
		{"IDs", testIDs[TTx]},
		{"CaseAndPadDistinct", testCaseAndPadDistinct[TTx]},
		{"FingerprintConflict", testFingerprintConflict[TTx]},
		{"NoFingerprint", testNoFingerprint[TTx]},
		{"IDsScopedByType", testScopeIDByType[TTx]},
		{"IDsNotScopedByType", testIDNotScopedByType[TTx]},
		// race.go: racing deliveries and lock waits
		{"RaceFirstCommits", func(t *testing.T, h Harness[TTx]) { testRace(t, h, true) }},
		{"RaceFirstAborts", func(t *testing.T, h Harness[TTx]) { testRace(t, h, false) }},
		{"ThreeRaceHolderRollsBack", testThreeRaceHolderRollsBack[TTx]},
		{"LockWaitsProbe", testLockWaitsProbe[TTx]},
		{"LockTimeoutIsRetryable", testLockTimeout[TTx]},
		// locktimeout.go: the lock timeout bounds every lock wait
		{"LockTimeoutHolds", testLockTimeoutHolds[TTx]},
		{"LockTimeoutReadBack", testLockTimeoutReadBack[TTx]},
		// attempts.go: failed attempts and what counts
		{"AttemptsSurviveRestartAndDeadLetter", testAttemptsAndDeadLetter[TTx]},
		{"RetryableHandlerError", testRetryableHandlerError[TTx]},
		{"HandlerPanic", testHandlerPanic[TTx]},
		{"RetryAfterAndCanceled", testRetryAfterAndCanceled[TTx]},
		{"TransientFailuresDoNotCount", testTransientFailures[TTx]},
		{"HandlerTimeoutCounts", testHandlerTimeoutCounts[TTx]},
		// deadletters.go: dead letters, listing, replay
		{"PermanentAndDiscard", testPermanentAndDiscard[TTx]},
		{"DeadLetterPaging", testDeadLetterPaging[TTx]},
		{"ReplayAfterRedelivery", testReplayAfterRedelivery[TTx]},
		{"InvalidMessageDeadLetteredOnce", testInvalidOnce[TTx]},
		{"HeadersRoundTrip", testHeadersRoundTrip[TTx]},
		// inspect.go: store.Inspector, for the command
		{"InspectStats", testInspectStats[TTx]},
		{"InspectSearch", testInspectSearch[TTx]},
		{"InspectGroups", testInspectGroups[TTx]},
		{"InspectFillGroups", testInspectFillGroups[TTx]},
		{"ActivityThroughput", testActivityThroughput[TTx]},
		{"ActivityRetrying", testActivityRetrying[TTx]},
		{"ActivityConsumers", testActivityConsumers[TTx]},
		{"ActivityRetryingList", testActivityRetryingList[TTx]},
		{"InspectDiscard", testInspectDiscard[TTx]},
		{"InspectRelease", testInspectRelease[TTx]},
		{"InspectReleaseTwice", testInspectReleaseTwice[TTx]},
		{"InspectReleaseLive", testInspectReleaseLive[TTx]},
		// processtx.go: the caller's transaction
		{"ProcessTx", testProcessTx[TTx]},
		{"ProcessTxSwallowedError", testProcessTxSwallowedError[TTx]},
		{"ProcessTxPoolExhausted", testProcessTxPoolExhausted[TTx]},
		// failures.go: the database failing
		{"ConnBusyCommitCounts", testLeftRowsOpen[TTx]},
		{"HandlerEndsTx", testHandlerEndsTx[TTx]},
		{"UnrecoverableError", testUnrecoverable[TTx]},
		{"DatabaseErrorsBackOff", testDatabaseErrorsBackOff[TTx]},
		// prune.go: pruning
		{"PruneBoundary", testPruneBoundary[TTx]},
		{"PruneBatches", testPruneBatches[TTx]},
		{"PrunerBusy", testPrunerBusy[TTx]},
		// keys.go: the idempotency keys' seam (store.KeyStore)
		{"KeysRoundTrip", testKeysRoundTrip[TTx]},
		{"KeysScoped", testKeysScoped[TTx]},
		{"KeysWithHandler", testKeysWithHandler[TTx]},
		{"KeysInUse", testKeysInUse[TTx]},
		{"KeysHolderRollsBack", testKeysHolderRollsBack[TTx]},
		{"KeysLockTimeout", testKeysLockTimeout[TTx]},
		{"KeysPrune", testKeysPrune[TTx]},
		{"KeysPrunerBusy", testKeysPrunerBusy[TTx]},
		{"KeysPrunerApart", testKeysPrunerApart[TTx]},
		{"KeysCommitWithoutClaim", testKeysCommitWithoutClaim[TTx]},
		{"KeysReplaysDoNotWait", testKeysReplaysDoNotWait[TTx]},
		{"KeysTableLockNotInUse", testKeysTableLockNotInUse[TTx]},
		// migrate.go: schema, tables, settings
		{"MigrateConcurrently", testMigrateConcurrently[TTx]},
		{"HostileTableNames", testHostileTables[TTx]},
		{"Prefix", testPrefix[TTx]},
		{"SchemaChecked", testSchemaChecked[TTx]},
		{"Durability", testDurability[TTx]},
		// idempotency.go: package idempotency's middleware over HTTP
		{"KeyReplay", testKeyReplay[TTx]},
		{"KeyConcurrent", testKeyConcurrent[TTx]},
		{"KeyInFlight", testKeyInFlight[TTx]},
		{"KeyReused", testKeyReused[TTx]},
		{"KeyFailures", testKeyFailures[TTx]},
		{"KeyForgetClientErrors", testKeyForgetClientErrors[TTx]},
		{"KeyHeader", testKeyHeader[TTx]},
		{"KeySlowClientGivesUp", testKeySlowClientGivesUp[TTx]},
		{"KeyHandlerEndsTx", testKeyHandlerEndsTx[TTx]},
		{"KeyNotMigrated", testKeyNotMigrated[TTx]},
		// outbox.go: the transactional outbox and its relay
		{"OutboxWriteRelay", testOutboxWriteRelay[TTx]},
		{"OutboxDuplicateID", testOutboxDuplicateID[TTx]},
		{"OutboxInvalid", testOutboxInvalid[TTx]},
		{"OutboxRetryAndPark", testOutboxRetryAndPark[TTx]},
		{"OutboxOutage", testOutboxOutage[TTx]},
		{"OutboxDiscard", testOutboxDiscard[TTx]},
		{"OutboxProbe", testOutboxProbe[TTx]},
		{"OutboxLease", testOutboxLease[TTx]},
		{"OutboxCommitOrder", testOutboxCommitOrder[TTx]},
		{"OutboxRelaysShare", testOutboxRelaysShare[TTx]},
		{"OutboxParallel", testOutboxParallel[TTx]},
		{"OutboxOrdered", testOutboxOrdered[TTx]},
		{"OutboxFromHandler", testOutboxFromHandler[TTx]},
		{"OutboxKeepPublished", testOutboxKeepPublished[TTx]},
		{"OutboxSchemaChecked", testOutboxSchemaChecked[TTx]},
		{"OutboxRunWakes", testOutboxRunWakes[TTx]},
		// outboxinspect.go: store.OutboxInspector, for the command
		{"OutboxInspectStats", testOutboxInspectStats[TTx]},
		{"OutboxInspectSearch", testOutboxInspectSearch[TTx]},
		{"OutboxInspectGet", testOutboxInspectGet[TTx]},
		// batch.go: ProcessBatch
		{"BatchOutcomes", testBatchOutcomes[TTx]},
		{"BatchFailures", testBatchFailures[TTx]},
		{"BatchLarge", testBatchLarge[TTx]},
		{"BatchRace", testBatchRace[TTx]},
		{"BatchClaimRepeatedID", testBatchClaimRepeatedID[TTx]},
		{"BatchFunc", testBatchFunc[TTx]},
		{"BatchTransient", testBatchTransient[TTx]},
		{"BatchHandlerEndsTx", testBatchHandlerEndsTx[TTx]},
		{"ConflictReported", testConflictReported[TTx]},
		{"BatchSplitOnConflict", testBatchSplitOnConflict[TTx]},
		{"BatchHotRows", testBatchHotRows[TTx]},
		{"BatchSplitPartFails", testBatchSplitPartFails[TTx]},
		{"BatchSplitShutdown", testBatchSplitShutdown[TTx]},
		{"BatchHotRowsShutdown", testBatchHotRowsShutdown[TTx]},
		// queued.go: ProcessQueued, where the store runs queued statements
		{"QueuedThenDuplicate", testQueuedThenDuplicate[TTx]},
		{"QueuedFailures", testQueuedFailures[TTx]},
		{"QueuedRace", testQueuedRace[TTx]},
		{"QueuedBadStatement", testQueuedBadStatement[TTx]},
		// hooks.go
		{"Hooks", testHooks[TTx]},
		{"HookPanics", testHookPanics[TTx]},
		{"StartHook", testStartHook[TTx]},
		{"StartHookDetached", testStartHookDetached[TTx]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

func process[TTx any](t *testing.T, ib *inbox.Inbox[TTx], m inbox.Message, hd inbox.Handler[TTx]) (inbox.Outcome, error) {
	t.Helper()
	return ib.Process(context.Background(), m, hd)
}

func wantStatus(t *testing.T, what string, got inbox.Outcome, want inbox.Status) {
	t.Helper()
	if got.Status != want {
		t.Fatalf("%s: status %v, want %v (outcome %+v)", what, got.Status, want, got)
	}
}
