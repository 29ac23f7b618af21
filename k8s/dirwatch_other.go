//go:build !linux

package k8s

import (
	"errors"
	"time"
)

// A notifier watches a directory where inotify exists; elsewhere there is
// none, and WatchDir polls.
type notifier struct{}

func newNotifier(string) (*notifier, error) {
	return nil, errors.New("inotify is Linux-only")
}

func (*notifier) watch() (bool, error) { return false, nil }
func (*notifier) wait(time.Duration)   {}
func (*notifier) wake()                {}
func (*notifier) drain(func(dirEvent)) {}
func (*notifier) close()               {}
