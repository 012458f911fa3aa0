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
		{"ClaimThenDuplicate", testClaimThenDuplicate[TTx]},
		{"HandlerErrorRollsBack", testHandlerErrorRollsBack[TTx]},
		{"RaceFirstCommits", func(t *testing.T, h Harness[TTx]) { testRace(t, h, true) }},
		{"RaceFirstAborts", func(t *testing.T, h Harness[TTx]) { testRace(t, h, false) }},
		{"AttemptsSurviveRestartAndDeadLetter", testAttemptsAndDeadLetter[TTx]},
		{"PermanentAndDiscard", testPermanentAndDiscard[TTx]},
		{"DeadLetterPaging", testDeadLetterPaging[TTx]},
		{"IDs", testIDs[TTx]},
		{"LockTimeoutIsRetryable", testLockTimeout[TTx]},
		{"PruneBoundary", testPruneBoundary[TTx]},
		{"PruneBatches", testPruneBatches[TTx]},
		{"PrunerBusy", testPrunerBusy[TTx]},
		{"MigrateConcurrently", testMigrateConcurrently[TTx]},
		{"HostileTableNames", testHostileTables[TTx]},
		{"Prefix", testPrefix[TTx]},
		{"FingerprintConflict", testFingerprintConflict[TTx]},
		{"ProcessTx", testProcessTx[TTx]},
		{"HandlerPanic", testHandlerPanic[TTx]},
		{"RetryAfterAndCanceled", testRetryAfterAndCanceled[TTx]},
		{"Durability", testDurability[TTx]},
		{"Hooks", testHooks[TTx]},
		{"ReplayAfterRedelivery", testReplayAfterRedelivery[TTx]},
		{"RetryableHandlerError", testRetryableHandlerError[TTx]},
		{"ThreeRaceHolderRollsBack", testThreeRaceHolderRollsBack[TTx]},
		{"LockWaitsProbe", testLockWaitsProbe[TTx]},
		{"CaseAndPadDistinct", testCaseAndPadDistinct[TTx]},
		{"TransientFailuresDoNotCount", testTransientFailures[TTx]},
		{"HandlerTimeoutCounts", testHandlerTimeoutCounts[TTx]},
		{"ConnBusyCommitCounts", testLeftRowsOpen[TTx]},
		{"InvalidMessageDeadLetteredOnce", testInvalidOnce[TTx]},
		{"ProcessTxSwallowedError", testProcessTxSwallowedError[TTx]},
		{"ProcessTxPoolExhausted", testProcessTxPoolExhausted[TTx]},
		{"SchemaChecked", testSchemaChecked[TTx]},
		{"UnrecoverableError", testUnrecoverable[TTx]},
		{"DatabaseErrorsBackOff", testDatabaseErrorsBackOff[TTx]},
		{"HookPanics", testHookPanics[TTx]},
		{"IDsScopedByType", testScopeIDByType[TTx]},
		{"IDsNotScopedByType", testIDNotScopedByType[TTx]},
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
