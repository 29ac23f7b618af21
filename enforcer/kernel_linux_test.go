package enforcer

import (
	"slices"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// TestKernelCompiledTablesMatchNft programs every compiled case over netlink
// and checks it lists exactly like nft's own load of the rendered text;
// the cluster policy cases too.
func TestKernelCompiledTablesMatchNft(t *testing.T) {
	for _, tc := range append(slices.Clip(compileCases), clusterCases...) {
		t.Run(tc.name, func(t *testing.T) {
			table := mustCompile(t, tc.snap)
			testns.AssertSameAsNft(t, table.Name, func(netns string) error {
				c, err := nft.Open(netns)
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Apply(table)
				return err
			}, nft.Render(table))
		})
	}
}
