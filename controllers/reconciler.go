package controllers

import (
	"context"
	"time"

	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/vsphere"
)

// GPUPoolProfileReconciler makes a GPUPoolProfile true: the wanted layout's VMs run with
// their vGPU profiles and their nodes are Ready and labelled, the other VMs are parked.
type GPUPoolProfileReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads the pool itself uncached when the cache may hold a status older
	// than the reconciler's own last write (which would start a vSphere task twice;
	// readPool).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Clock is injected so tests can step time across window boundaries.
	Clock   clock.PassiveClock
	VSphere vsphere.Connector
	// Credentials says which namespaces credentials Secrets may be read from; the zero
	// value allows none.
	Credentials secretpolicy.Policy
	// secretsWatched: the credentials namespace's Secrets wake their pools
	// (watchCredentials could make the watch).
	secretsWatched bool
	// MaxConcurrentReconciles is how many pools are reconciled at once (default 4), so
	// that one pool's long pass never holds another back. One pool is never reconciled
	// twice at the same time.
	MaxConcurrentReconciles int
	// MaxConcurrentStarts bounds the vSphere task starts a pool asks for at once past
	// its passes; 0: execute.MaxConcurrentStarts.
	MaxConcurrentStarts int
	// RequestRetention is how long a GPUPoolRequest stays after it reached a final
	// phase; 0: DefaultRequestRetention.
	RequestRetention time.Duration
	// UsageInterval is how often a pool's GPUPoolUsage is written at most; 0:
	// DefaultUsageInterval.
	UsageInterval time.Duration
	// StatusInterval is how long a pass may leave unwritten the changes of the status
	// that can be observed again (statusdefer.go); 0 writes every pass's status.
	StatusInterval time.Duration
	// MinPassInterval is how long after a pool's pass began a wake by the pool's own work
	// (its nodes, pods and tasks) starts the next pass at the soonest (passpace.go); 0:
	// at once.
	MinPassInterval time.Duration
	// pace spaces those passes (nil: the tests that call Reconcile directly).
	pace *passPace

	// nodePods watches the pods of the pools' nodes (the manager's cache holds only
	// unbound pods); nil (the tests that call Reconcile directly) lists them through
	// Client.
	nodePods *nodePods
	// podsIndexed: Client reads pods from the manager's cache, which indexes them
	// (indexPods); false for a client straight to the API server (pendingPods).
	podsIndexed bool

	// terminating measures how long pods have been terminating, on Clock (see
	// drain.TerminatingClock): a drain waits for them a bounded time.
	terminating drain.TerminatingClock

	// tasks wakes a pool when one of its vSphere tasks ends; nil (the tests that call
	// Reconcile directly) leaves the waits to the requeue.
	tasks *taskWatch
	// evictions runs the drains' evictions past the pass that hands them out, and wakes
	// the pool when a node's round ends with what no pod event tells (the node drained,
	// pods blocking or holding, an error); nil (the tests that call Reconcile directly)
	// evicts inside the pass.
	evictions *execute.Evictions
	// starts asks vCenter to start the tasks a pass queued past the pass, and wakes the
	// pool once a pass's starts are all answered; nil (the tests that call Reconcile
	// directly) starts them inside the pass.
	starts *execute.Starts
	// states writes the node state labels a pass decides past the pass (statebatch.go);
	// nil (the tests that call Reconcile directly) writes them inside the pass.
	states *stateBatches
	// ready relabels and uncordons a node the moment it is ready for work, when the
	// pool's last pass left only that to do (readyfollow.go); nil (the tests that call
	// Reconcile directly) leaves it to the next pass.
	ready *readyFollow
	// kueueWatch starts the watches of Kueue's objects once Kueue is installed; demand
	// asks it whether Kueue is served. nil (the tests that call Reconcile directly)
	// watches nothing.
	kueueWatch *kueueWatch
	// kueue is the Kueue controller SetupWithManager registers beside this one; the
	// deletion pass releases the pool's checks through it (kueueBridge).
	kueue kueueReleaser

	// maxNodeWrites, maxCordons and maxEvictions override maxNodeWritesPerPass,
	// maxCordonsPerPass and maxEvictionsPerPass when not 0 (tests, to cross the caps with
	// few nodes).
	maxNodeWrites, maxCordons, maxEvictions int
	// stalls counts the capped passes in a row that made no write, per pool
	// (afterCapped).
	stalls stallCount
	// conversions remembers what each pool's layouts by count last resolved to, so that
	// a pass starts from that choice (expandSpec).
	conversions poolMemo[map[string]gpupoolv1.Layout]
	// selections remembers what each pool's select layouts last selected, so that a
	// pass starts from it and keeps it when the selector cannot be read (select.go).
	selections poolMemo[map[string]plan.Selected]
	// usage is each pool's GPU-hour ledger (usage.go).
	usage poolMemo[*usageState]
	// fresh is, per pool, the newest resourceVersion this reconciler wrote or read from
	// the API server: the cache serves a pass's read of the pool when it holds that
	// version (readPool).
	fresh poolMemo[string]
	// unwritten is, per pool, what its last pass decided and left unwritten
	// (StatusInterval); the next pass starts from it (resume).
	unwritten poolMemo[*unwrittenStatus]
}

// kueueReleaser releases the admission checks a pool being deleted holds (the Kueue
// controller, KueueReconciler), so that the deletion pass can wait for it.
type kueueReleaser interface {
	releaseDeleted(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time) time.Duration
}
