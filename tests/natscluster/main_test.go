package natscluster_test

import (
	"os"
	"testing"

	"github.com/inboxkit/inbox/tests/internal/natscluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	natscluster.Cleanup()
	os.Exit(code)
}
