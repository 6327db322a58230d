package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DesiredByDemand means spec.demand moved the pool off its schedule: a rule brought a
// layout in early, kept it while its work runs, or skipped or ended a layout nobody uses.
const DesiredByDemand DesiredReason = "Demand"

// DemandAction is what a demand rule may do with its layout.
// +kubebuilder:validation:Enum=BringIn;Skip
type DemandAction string

const (
	// DemandBringIn lets pending GPU pods that only the layout's nodes could serve bring
	// the layout in before its window, and keep it while they run.
	DemandBringIn DemandAction = "BringIn"
	// DemandSkip lets the pool stay on (or go back to) another layout while the schedule
	// wants this one and nothing uses it.
	DemandSkip DemandAction = "Skip"
)

// DemandPolicy lets demand move the pool off its schedule, within guard rails. The
// precedence is override > demand (inside these limits) > schedule > default.
//
// Demand is what gpupool sees in the cluster: pods that cannot be scheduled, that request
// GPUs (readiness.gpuResource), and whose node selector or required node affinity matches
// the labels of a layout's nodes (its nodeLabels, gpupool.dev/layout and
// gpupool.dev/vgpu-profile) and not the active layout's. Only the pods (and Kueue
// Workloads) of the namespaces namespaceSelector selects count: tenants elsewhere can
// neither bring a layout in nor keep it. See docs/demand.md.
// +kubebuilder:validation:XValidation:rule=`has(self.namespaceSelector)`,message=`spec.demand.namespaceSelector is required: it names the namespaces whose pods and Kueue Workloads may bring layouts in or keep them; write namespaceSelector: {matchLabels: {gpupool.dev/demand: "true"}} and label those namespaces, or namespaceSelector: {} to let the pods of every namespace count`
type DemandPolicy struct {
	// NamespaceSelector selects the namespaces whose pods and Kueue Workloads count as
	// demand. Required: {} selects every namespace; to name namespaces, match the
	// kubernetes.io/metadata.name label, such as {matchExpressions: [{key:
	// kubernetes.io/metadata.name, operator: In, values: [ml-team]}]}. Pods of other
	// namespaces neither bring a layout in, nor keep one, nor wake the pool; they are
	// still counted (as counts per namespace, never by name) when a switch would evict
	// them.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// PodSelector, when set, narrows demand to the pods (of the selected namespaces)
	// whose labels it matches. Kueue Workloads are selected by namespace only.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// Rules say which layouts demand may bring in or skip, and when. At most one rule per
	// layout and action.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Rules []DemandRule `json:"rules"`

	// MinDwell is the least time a layout stays active before demand switches away from
	// it, or lets a layout it brought in go: no flapping between layouts faster than this.
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`minDwell must be a duration such as 30m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'minDwell must be a duration such as 30m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for the default of 30m' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) >= duration('0s')`,message=`minDwell must be zero or positive, such as 30m`,messageExpression=`'minDwell must be zero or positive, such as 30m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	MinDwell *metav1.Duration `json:"minDwell,omitempty"`

	// Cooldown is the least time between the start of any switch (scheduled, overridden
	// or demanded) and the start of a switch demand asks for.
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`cooldown must be a duration such as 15m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'cooldown must be a duration such as 15m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for the default of 15m' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) >= duration('0s')`,message=`cooldown must be zero or positive, such as 15m`,messageExpression=`'cooldown must be zero or positive, such as 15m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	Cooldown *metav1.Duration `json:"cooldown,omitempty"`

	// MaxSwitchesPerDay is the switch budget: demand starts no switch when this many
	// scheduled or demand switches started in the last 24 hours (overrides, a person's
	// own decision, do not count; gpupool.dev/reset-demand-budget resets it; the count is
	// in status.demand.budget). At most 8, because status.history, from which the budget
	// is counted, keeps 10.
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	// +optional
	MaxSwitchesPerDay *int32 `json:"maxSwitchesPerDay,omitempty"`

	// MaxEvictions is the largest disruption a demand switch may cause: it is not started
	// while it would evict more GPU pods than this. 0, the default, reshapes only nodes
	// that run no GPU pod. A pod annotated gpupool.dev/do-not-disrupt: "true", and a pod
	// of a Job that is near completion (at least two completions, three quarters of them
	// succeeded), always hold a demand switch back, whatever this says.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxEvictions *int32 `json:"maxEvictions,omitempty"`
}

// DemandRule is what demand may do with one layout.
type DemandRule struct {
	// Layout is the layout the rule brings in or skips.
	// +kubebuilder:validation:MinLength=1
	Layout string `json:"layout"`

	// Action is BringIn (pending work brings the layout in early and keeps it while it
	// runs) or Skip (while the schedule wants the layout and nothing is pending for it or
	// runs on it, the pool stays on the layout it has; an idle active layout is ended
	// for `instead`, by default defaultLayout).
	Action DemandAction `json:"action"`

	// Instead is, for Skip, the layout an idle active layout is ended for; defaultLayout
	// when unset. While the rule skips its layout, the pool keeps the layout it has.
	// +optional
	Instead string `json:"instead,omitempty"`

	// Windows are when the rule may act, read in schedule.timeZone; without windows it may
	// act at any time. Example: start "0 12 * * 1-5", duration 8h: weekdays 12:00-20:00.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Windows []DemandWindow `json:"windows,omitempty"`

	// MinGPUs is how many GPUs pending pods must request for the layout before it is
	// demanded (BringIn); for Skip, pending demand of this size lifts the skip. The
	// BringIn and Skip rules of one layout must agree on it.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MinGPUs *int32 `json:"minGPUs,omitempty"`

	// For is how long the demand must stay at or above minGPUs before it acts, as the
	// cluster autoscaler waits before it scales: a pod that is pending for a moment
	// switches nothing.
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`for must be a duration such as 2m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'for must be a duration such as 2m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for the default of 2m' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) >= duration('0s')`,message=`for must be zero or positive, such as 2m`,messageExpression=`'for must be zero or positive, such as 2m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	For *metav1.Duration `json:"for,omitempty"`

	// IdleFor is how long nothing must be pending for the layout and no GPU pod run on
	// its nodes before demand lets a layout it brought in go (BringIn) or ends the
	// layout (Skip), as KEDA's cooldownPeriod does before scaling to zero.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`idleFor must be a duration such as 10m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'idleFor must be a duration such as 10m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for the default of 10m' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) >= duration('0s')`,message=`idleFor must be zero or positive, such as 10m`,messageExpression=`'idleFor must be zero or positive, such as 10m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	IdleFor *metav1.Duration `json:"idleFor,omitempty"`

	// CountFromDemand sizes a layout by count (spec.layouts[].convert) by its demand:
	// while its windows are open, the number of GPUs converted follows the GPUs pending
	// for the layout and running on its converted nodes, within min and max, in steps.
	// A step is a transition of its own, started only within the guard rails (minDwell,
	// cooldown, maxSwitchesPerDay, maxEvictions, do-not-disrupt pods) and announced
	// warnAhead before it when it evicts. Only on a BringIn rule of a layout by count.
	// docs/count-layouts.md.
	// +optional
	CountFromDemand *CountFromDemand `json:"countFromDemand,omitempty"`
}

// CountFromDemand bounds the count demand sizes a layout by count to.
// +kubebuilder:validation:XValidation:rule=`self.max >= self.min`,message=`countFromDemand.max must be at least countFromDemand.min: raise max, or lower min`
type CountFromDemand struct {
	// Min is the fewest GPUs converted while the layout is active, whatever the demand.
	// Default 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 4096",message="countFromDemand.min must be between 1 and 4096 GPUs converted; leave it out for at least 1"
	// +optional
	Min int32 `json:"min,omitempty"`
	// Max is the most GPUs converted, whatever the demand: at most the GPUs the
	// candidates can fill.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 4096",message="countFromDemand.max must be between 1 and 4096 GPUs converted, and at least min"
	Max int32 `json:"max"`
}

// DemandWindow is a recurring time in which a demand rule may act.
type DemandWindow struct {
	// Start is a 5-field cron expression, read in schedule.timeZone, at which the window
	// opens. Example: "0 12 * * 1-5".
	// +kubebuilder:validation:MinLength=1
	Start string `json:"start"`

	// Duration is how long the window stays open after each start, such as 8h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`duration must be a duration such as 12h, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'duration must be a duration such as 12h, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': write how long the window stays open, such as 12h' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) > duration('0s')`,message=`duration must be positive, such as 12h`,messageExpression=`'duration must be positive, such as 12h, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	Duration metav1.Duration `json:"duration"`
}

// DemandStatus is what gpupool saw of the demand for each layout and what it did.
type DemandStatus struct {
	// Message says what demand decided this pass, or why it did not act (below the
	// threshold, dwell, cooldown, switch budget, disruption limit).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// Switch is a demand switch that was decided and waits for its warning (warnAhead)
	// to run out before it starts.
	// +optional
	Switch *DemandSwitch `json:"switch,omitempty"`
	// Budget is the switch budget (spec.demand.maxSwitchesPerDay) as demand counted it.
	// +optional
	Budget *DemandBudget `json:"budget,omitempty"`
	// Step is a count step (a rule's countFromDemand) that was decided and waits for its
	// warning (warnAhead) to run out before it starts.
	// +optional
	Step *CountStep `json:"step,omitempty"`
	// Layouts is the demand for each layout of the pool.
	// +optional
	// +listType=map
	// +listMapKey=layout
	// +kubebuilder:validation:MaxItems=16
	Layouts []LayoutDemand `json:"layouts,omitempty"`
}

// DemandBudget is the switch budget: how many switches count toward
// maxSwitchesPerDay, and since when, after an admin's reset.
type DemandBudget struct {
	// Used is how many switches count: started in the last 24 hours (after the last
	// reset), scheduled or demanded. Overrides do not count.
	Used int32 `json:"used"`
	// Max is spec.demand.maxSwitchesPerDay.
	Max int32 `json:"max"`
	// NextAt is, while the budget is spent, when one more switch is allowed.
	// +optional
	NextAt *metav1.Time `json:"nextAt,omitempty"`
	// ResetTime is when gpupool saw the pool's gpupool.dev/reset-demand-budget
	// annotation change (gpupool's clock): switches before it do not count.
	// +optional
	ResetTime *metav1.Time `json:"resetTime,omitempty"`
	// ResetToken is the annotation's value at that reset, to see the next change.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ResetToken string `json:"resetToken,omitempty"`
}

// CountStep is a step of a layout by count's count, announced ahead.
type CountStep struct {
	// Layout is the layout by count.
	Layout string `json:"layout"`
	// From and To are the counts before and after the step.
	From int32 `json:"from"`
	To   int32 `json:"to"`
	// DecidedTime is when demand decided it (gpupool's clock).
	DecidedTime metav1.Time `json:"decidedTime"`
	// At is when it starts, after the warning.
	At metav1.Time `json:"at"`
	// Message says why.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// DemandSwitch is a demand switch announced ahead.
type DemandSwitch struct {
	// Layout is the layout switched to.
	Layout string `json:"layout"`
	// Action is the rule's action: BringIn, or Skip (ending a layout nobody uses).
	Action DemandAction `json:"action"`
	// DecidedTime is when demand decided it (gpupool's clock).
	DecidedTime metav1.Time `json:"decidedTime"`
	// At is when it starts, after the warning.
	At metav1.Time `json:"at"`
	// Message names the pods that caused it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// LayoutDemand is the demand gpupool saw for one layout, and the work a switch to it
// would cost the active layout.
type LayoutDemand struct {
	// Layout is the layout.
	Layout string `json:"layout"`
	// PendingPods is how many unschedulable GPU pods (and, with spec.kueue, held
	// Workloads) only this layout's nodes could serve.
	// +optional
	PendingPods int32 `json:"pendingPods,omitempty"`
	// PendingGPUs is how many GPUs they request.
	// +optional
	PendingGPUs int64 `json:"pendingGPUs,omitempty"`
	// Pods names some of them ("pod namespace/name", "workload namespace/name"), at most
	// 5; all are of namespaces spec.demand.namespaceSelector selects.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	Pods []string `json:"pods,omitempty"`
	// RunningGPUs is how many GPUs the pods on this layout's nodes request.
	// +optional
	RunningGPUs int64 `json:"runningGPUs,omitempty"`
	// PendingSince is since when the pending GPUs have been at or above the rule's
	// minGPUs, on gpupool's clock.
	// +optional
	PendingSince *metav1.Time `json:"pendingSince,omitempty"`
	// IdleSince is since when nothing has been pending for the layout and no GPU pod has
	// run on its nodes, on gpupool's clock.
	// +optional
	IdleSince *metav1.Time `json:"idleSince,omitempty"`
	// Evictions is how many GPU pods a switch from the active layout to this one would
	// evict.
	// +optional
	Evictions int32 `json:"evictions,omitempty"`
	// DoNotDisrupt is how many pods on the nodes that switch drains are annotated
	// gpupool.dev/do-not-disrupt, GPU pods or not.
	// +optional
	DoNotDisrupt int32 `json:"doNotDisrupt,omitempty"`
	// JobsNearCompletion is how many of them belong to a Job near completion.
	// +optional
	JobsNearCompletion int32 `json:"jobsNearCompletion,omitempty"`
}
