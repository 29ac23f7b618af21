//go:build !linux

package enforcer

import (
	"testing"

	"github.com/nftpolicy/nftpolicy/nft"
)

// A fuzzKernel does nothing where there is no nf_tables: FuzzCompile checks
// the compiled tables with the tracer only.
type fuzzKernel struct{}

func newFuzzKernel(*testing.F) *fuzzKernel                { return &fuzzKernel{} }
func (*fuzzKernel) apply(*testing.T, *nft.Table, *genned) {}
