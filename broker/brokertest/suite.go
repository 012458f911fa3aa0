package brokertest

import (
	"testing"
)

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
		need func(Features) bool
	}{
		{"UnackedComesBack", testUnackedComesBack, nil},
		{"RedeliveryAfterCrashIsDuplicate", testRedeliveryAfterCrash, nil},
		{"RetryWithDelayThenSuccess", testRetryThenSuccess, nil},
		{"RetriesDoNotBlock", testRetriesDoNotBlock, nil},
		{"PoisonDeadLetteredAtMaxAttempts", testPoison, nil},
		{"MissingIDDeadLettered", testMissingID, nil},
		{"CustomIDFunc", testCustomID, nil},
		{"ShutdownMidHandlerDoesNotAck", testShutdown, nil},
		{"CrashMidHandlerLosesNothing", testCrashMidHandler, nil},
		{"LongHandlerKeepsLease", testLongHandler, nil},
		{"ShutdownGraceCommitsAndAcks", testShutdownGrace, nil},
		{"ShutdownAcksEveryCommit", testShutdownAcks, nil},
		{"BrokerRestart", testRestart, func(f Features) bool { return f.Restart }},
		{"LogsAtDefaultLevel", testLogsAtDefaultLevel, nil},
		{"UnrecoverableStopsConsume", testUnrecoverableStopsConsume, nil},
		{"HandlerSeesDelivery", testHandlerSeesDelivery, nil},
		{"HandlerSeesPublishTime", testHandlerSeesPublishTime, nil},
		{"PanickingHookStillAcks", testPanickingHook, nil},
		{"BatchConsume", testBatchConsume, nil},
		{"PrefetchWarning", testPrefetchWarning, nil},
		{"RepublishEffectOnce", testRepublish, nil},
		{"PublishedFieldsArrive", testFieldsArrive, nil},
		{"PublishedKeyArrives", testKeyArrives, nil},
		{"OwnHeadersNotForwarded", testOwnHeaders, nil},
		{"PublishRefusesNowhere", testPublishNowhere, nil},
		{"PublishRefusesOversizedPayload", testPublishOversized, nil},
		{"PublishRefusesBadHeaders", testPublishBadHeaders, nil},
		{"PublishHonoursCanceledContext", testPublishCanceled, nil},
		{"Queued/EffectOnceAfterCrash", testQueuedEffectOnce, nil},
		{"Queued/RedeliveryAfterCommitIsDuplicate", testQueuedRedeliveryIsDuplicate, nil},
		{"Queued/RetryThenSuccess", testQueuedRetryThenSuccess, nil},
		{"Queued/FailedStatementIsHandlerFailure", testQueuedFailedStatement, nil},
		{"Queued/ShutdownAcksEveryCommit", testQueuedShutdownAcks, nil},
	}
	for _, tc := range tests {
		if tc.need != nil && !tc.need(h.Features) {
			continue // another harness of the adapter has the feature
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}
