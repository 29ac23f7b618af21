package testbin

import (
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// A Proc is a started command; a goroutine waits for its exit.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartLocked runs cmd.Start on one OS thread that never exits, for a cmd
// with Pdeathsig. Pdeathsig is sent when the thread that started the
// child exits, not the process, and Go ends threads (nft, netlink and the
// netns harness throw away threads they switched into another namespace),
// so a child started from an arbitrary goroutine could be killed in the
// middle of a run.
func StartLocked(cmd *exec.Cmd) error {
	errc := make(chan error)
	starter <- func() { errc <- cmd.Start() }
	return <-errc
}

var starter = func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
}()

// Start starts cmd and returns it as a Proc.
func Start(cmd *exec.Cmd) (*Proc, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return Started(cmd), nil
}

// Started returns cmd, which the caller has started, as a Proc. Nothing
// else may call cmd.Wait.
func Started(cmd *exec.Cmd) *Proc {
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p
}

// Done is closed once the process has exited and its output is copied.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns what exec.Cmd.Wait did.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, kills the process if it has not exited within grace,
// and returns Wait's error. It is safe to call after the process exited.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Exited() {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	}
	return p.WaitOrKill(grace)
}

// WaitOrKill waits up to grace for the process to exit (after the caller
// asked it to, some other way), then kills it; it returns Wait's error.
func (p *Proc) WaitOrKill(grace time.Duration) error {
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
	}
	return p.Wait()
}

// Kill kills the process with SIGKILL, as a crash or an OOM kill would, and
// waits for it.
func (p *Proc) Kill() error {
	if !p.Exited() {
		_ = p.Cmd.Process.Kill()
	}
	return p.Wait()
}
