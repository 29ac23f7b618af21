//go:build !linux

package flowlog

import "errors"

// A Reader receives logged packets; only Linux has them.
type Reader struct{}

// ErrUnsupported: flow logs need Linux nfnetlink_log.
var ErrUnsupported = errors.New("flow log: nfnetlink_log needs Linux")

// ErrOverrun: see the Linux build.
var ErrOverrun = errors.New("flow log: packets dropped by the kernel (reader too slow)")

// Open fails off Linux.
func Open(path string, group uint16) (*Reader, error) { return nil, ErrUnsupported }

// Read fails off Linux.
func (r *Reader) Read() ([]Record, error) { return nil, ErrUnsupported }

// Close does nothing off Linux.
func (r *Reader) Close() error { return nil }
