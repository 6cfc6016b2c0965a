package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// NodeDaemon is a long-running process of a Node (its engine, netshim,
// kubelet), started inside the node's namespaces, its output appended to a
// log in the node's directory. With restart it is kept running as a
// systemd unit with Restart=always would keep it: kubeadm expects a
// kubelet service that comes back, crash-looping until kubeadm has written
// its configuration, and restarts it itself through the init system, which
// these nodes do not have.
type NodeDaemon struct {
	Name    string
	LogPath string

	node    *Node
	bin     string
	args    []string
	restart bool

	stopCh chan struct{} // closed by Stop
	done   chan struct{} // closed when the supervisor returns (restart only)

	mu     sync.Mutex
	proc   *proc
	starts int
}

// daemonRestartDelay is the pause between a restarting daemon's exit and
// its next start (kubeadm's kubelet unit: RestartSec=10; shorter here, the
// nodes start in a test).
const daemonRestartDelay = 2 * time.Second

// StartDaemon starts bin in the node and, with restart, restarts it
// whenever it exits until Stop.
func (n *Node) StartDaemon(name string, restart bool, bin string, args ...string) (*NodeDaemon, error) {
	d := &NodeDaemon{
		Name: name, LogPath: filepath.Join(n.Dir, name+".log"),
		node: n, bin: bin, args: args, restart: restart, stopCh: make(chan struct{}),
	}
	if err := d.start(); err != nil {
		return nil, err
	}
	if restart {
		d.done = make(chan struct{})
		go d.supervise()
	}
	return d, nil
}

func (d *NodeDaemon) start() error {
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// nsenter execs bin after entering the namespaces: the process is
	// the daemon itself, and a signal to it reaches the daemon.
	// Never cancelled: the daemon outlives the call that starts it.
	cmd := d.node.Command(context.Background(), d.bin, d.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p, err := startProc(cmd, logf)
	if err != nil {
		return fmt.Errorf("node %s: %s: %w", d.node.Name, d.Name, err)
	}
	d.mu.Lock()
	d.proc = p
	d.starts++
	d.mu.Unlock()
	return nil
}

// supervise restarts the daemon after each exit, until Stop.
func (d *NodeDaemon) supervise() {
	defer close(d.done)
	for {
		d.mu.Lock()
		p := d.proc
		d.mu.Unlock()
		select {
		case <-p.done:
		case <-d.stopCh:
			return
		}
		select {
		case <-time.After(daemonRestartDelay):
		case <-d.stopCh:
			return
		}
		if err := d.start(); err != nil {
			// Logged where the daemon's own output goes; tried again.
			if f, ferr := os.OpenFile(d.LogPath, os.O_WRONLY|os.O_APPEND, 0o644); ferr == nil {
				fmt.Fprintf(f, "harness: restarting %s: %v\n", d.Name, err)
				f.Close()
			}
			d.mu.Lock()
			d.proc = &proc{done: closedChan()}
			d.mu.Unlock()
		}
	}
}

func closedChan() chan struct{} { c := make(chan struct{}); close(c); return c }

// Starts is how many times the daemon was started.
func (d *NodeDaemon) Starts() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.starts
}

// Pid is the running daemon's process ID, 0 if it is not running.
func (d *NodeDaemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc == nil || d.proc.cmd == nil || d.proc.exited() {
		return 0
	}
	return d.proc.pid()
}

// Stop ends the supervision and stops the daemon with SIGTERM (SIGKILL
// after timeout, which is then an error).
func (d *NodeDaemon) Stop(timeout time.Duration) error {
	select {
	case <-d.stopCh:
	default:
		close(d.stopCh)
	}
	// The supervisor first: once it returned, no start races the stop.
	if d.done != nil {
		<-d.done
	}
	d.mu.Lock()
	p := d.proc
	d.mu.Unlock()
	if p == nil || p.cmd == nil {
		return nil
	}
	return p.stop(d.node.Name+" "+d.Name, syscall.SIGTERM, timeout)
}

// LogTail is the last n lines of the daemon's log.
func (d *NodeDaemon) LogTail(n int) string { return tail(d.LogPath, n) }
