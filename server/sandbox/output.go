package sandbox

import (
	"io"
	"os"
	"os/exec"
	"time"
)

// output carries a child's stdout and stderr through pipes of the host's
// own, copied on goroutines of its own, instead of exec.Cmd's, whose Wait
// waits for the child's exit as well as for the copies. An init in the
// namespaces mode reports the end of its run before it exits (Report.Reaped),
// and the run's result then waits for its output alone (Process.wait).
type output struct {
	r, w [2]*os.File
	done chan struct{} // closed once both copies have ended
}

// outputGrace bounds how long a result waits for output after the run
// ended: a descendant holding the pipes open must not hold the result (as
// exec.Cmd's WaitDelay does for the other modes).
const outputGrace = 500 * time.Millisecond

// pipeOutput gives cmd pipes for its stdout and stderr, which will be
// copied to stdout and stderr once [output.started] is called.
func pipeOutput(cmd *exec.Cmd) (*output, error) {
	o := &output{done: make(chan struct{})}
	for i := range o.r {
		r, w, err := os.Pipe()
		if err != nil {
			o.closeAll()
			return nil, err
		}
		o.r[i], o.w[i] = r, w
	}
	cmd.Stdout, cmd.Stderr = o.w[0], o.w[1]
	return o, nil
}

// started lets go of the write ends (the child has its copies) and starts
// copying to stdout and stderr. It is called whether or not the child
// started.
func (o *output) started(stdout, stderr io.Writer) {
	for _, w := range o.w {
		w.Close()
	}
	ended := make(chan struct{}, 2)
	for i, dst := range []io.Writer{stdout, stderr} {
		go func(r *os.File) {
			_, _ = io.Copy(dst, r)
			r.Close()
			ended <- struct{}{}
		}(o.r[i])
	}
	go func() {
		<-ended
		<-ended
		close(o.done)
	}()
}

// wait returns once both copies have ended, or after grace, when it closes
// the read ends and so ends the copies.
func (o *output) wait(grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-o.done:
		return
	case <-t.C:
	}
	for _, r := range o.r {
		r.Close()
	}
	<-o.done
}

func (o *output) closeAll() {
	for _, f := range append(o.r[:], o.w[:]...) {
		if f != nil {
			f.Close()
		}
	}
}
