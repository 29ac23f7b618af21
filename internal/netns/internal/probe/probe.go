// Package probe holds the probes of the internal/netns harness, shared by the
// nettool command and the harness itself (which runs them in-process on a
// thread switched into the source network namespace).
//
// A nil error means the probe got through; any error means it did not.
package probe

import (
	"crypto/rand"
	"time"
)

// udpResend is how often UDP resends its token while waiting for the echo.
const udpResend = 200 * time.Millisecond

func newToken() ([]byte, error) {
	token := make([]byte, 16)
	_, err := rand.Read(token)
	return token, err
}
