//go:build !linux

package nft

// Inspect fails off Linux.
func (c *Conn) Inspect() (*Inspection, error) { return nil, ErrUnsupported }

// ProbeFeatures fails off Linux.
func ProbeFeatures() ([]FeatureCheck, error) { return nil, ErrUnsupported }
