package loadkit

import "errors"

// ErrNoUsage reports that resource use cannot be read on this platform.
var ErrNoUsage = errors.New("loadkit: resource use is not available on this platform")
