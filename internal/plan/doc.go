// Package plan is gpupool's decision making: which layout the pool should have now
// (Desired), whether the observed vSphere inventory can take that layout (Check), and
// which steps take the pool there from what is observed now (Build, Plan.Due).
//
// Everything here is a pure function of the spec, the observed state and a time passed
// in: no clients, no goroutines, no clock. The controller observes, calls in here,
// executes the steps that are due, and calls in here again on the next reconcile. Nothing
// is remembered between calls, so a restart of the operator, a failed task or an admin's
// hand on a VM all lead to the same thing: a fresh plan from the state as it is.
package plan
