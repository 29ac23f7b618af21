package enforcer

import "testing"

// TestKernelUnionsChangeKind syncs the union world into the kernel with
// unions held as ranges from runs of two addresses, so that they change
// kind and name as the world changes: the kernel must take each delta
// (the new set, the chains asking it rewritten, the old set gone) and
// hold a fresh compile's table after each (runUUKernel).
func TestKernelUnionsChangeKind(t *testing.T) {
	lowerUnionRunLength(t, 1)
	t.Run("now", func(t *testing.T) { runUUKernel(t, 33, true, false, 25) })
	t.Run("deferred", func(t *testing.T) { runUUKernel(t, 32, true, true, 25) })
}
