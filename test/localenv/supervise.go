package localenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// supervised are the control-plane components that exit by themselves when the API
// server does not answer for longer than their leader-election lease (kube-controller-
// manager and kube-scheduler do, by design, to let another replica lead). In a cluster
// the kubelet restarts them; here nothing would, and a fault test that freezes the API
// server for 20 s would leave the environment without garbage collection, ReplicaSets
// and scheduling.
// kwok (the kubelets' stand-in, pid file kwok-controller.pid) is restarted too, should it
// exit, and so is Kueue's manager when Up started it (restartKueue).
var supervised = []string{"kube-controller-manager", "kube-scheduler", "kwok-controller"}

// superviseEvery is how often the supervisor looks at them.
const superviseEvery = time.Second

// Supervise restarts the supervised components when they have exited, until ctx ends:
// kwokctl start cluster starts exactly the components that do not run (it keeps their
// pid files, so that kwokctl delete cluster, and Down, stop the new processes too). It
// runs in the power wire's process, which Down stops before it deletes the cluster.
func Supervise(ctx context.Context, e *Env) {
	t := time.NewTicker(superviseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := e.restartKueue(); err != nil && ctx.Err() == nil {
			fmt.Fprintln(e.logOut(), "supervisor:", err)
		}
		var gone []string
		for _, name := range supervised {
			if f := e.pidFile(name); !running(f) {
				// Note: kwokctl takes a zombie (a process nobody reaped) for running; the
				// pid file goes, so that it starts the component again.
				_ = os.Remove(f)
				gone = append(gone, name)
			}
		}
		if len(gone) == 0 {
			continue
		}
		fmt.Fprintf(e.logOut(), "supervisor: %s not running; starting again\n", strings.Join(gone, ", "))
		startCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err := e.kwokctl(startCtx, "start", "cluster", "--name", clusterName)
		cancel()
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(e.logOut(), "supervisor:", err)
		}
	}
}

// running tells whether the process a pid file names runs.
func running(pidFile string) bool {
	pid, err := readPid(pidFile)
	return err == nil && !exited(pid)
}
