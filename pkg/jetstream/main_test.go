package jetstream

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the feed's, the
// transport's and the NATS connections' all end with their owners.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
