package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/accounting"
)

// usageState is one pool's accounting between passes. The pass (account) and the
// flusher (flushUsage) share it under mu; API calls are made without it.
type usageState struct {
	mu     sync.Mutex
	ledger *accounting.Ledger
	// pool, uid and keep are the pool's, as its last pass saw them: the owner of its
	// GPUPoolUsage and how many days are kept.
	pool string
	uid  types.UID
	keep int32
	// unobserved: the pool's last pass did not see its world (paused, vCenter not
	// read): what its pass before saw may not hold, so the flusher does not carry it on.
	unobserved bool
	// pruned is the day retention last ran for.
	pruned string
	// claimGPUs are the devices of the pool's GPU class the running claim pods ask for,
	// by pod UID, read once per pod (a pod's claims do not change): the pass's alone,
	// kept for the pods its last pass saw.
	claimGPUs map[types.UID]int64
	// versions are the resourceVersions of the days this manager wrote last, by name:
	// the flusher's alone, read and written without mu.
	versions map[string]string
}
