package main

import "flag"

// maxConcurrentReconciles is how many pools are reconciled at once, so that one pool's
// pass never holds another pool's back; a pool is never reconciled twice at once.
var maxConcurrentReconciles = flag.Int("max-concurrent-reconciles", 4, "How many GPUPoolProfiles are reconciled at the same time.")
