package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RequestAction is what a GPUPoolRequest asks of its pool.
// +kubebuilder:validation:Enum=Switch;Resume;Pause;Unpause
type RequestAction string

const (
	// RequestSwitch forces spec.layout on the pool until the request expires, as
	// spec.override does, and over it.
	RequestSwitch RequestAction = "Switch"
	// RequestResume ends the pool's earlier Switch requests: the schedule (or
	// spec.override, when the pool's spec has one) applies again.
	RequestResume RequestAction = "Resume"
	// RequestPause pauses the pool until the request expires, as spec.paused does.
	RequestPause RequestAction = "Pause"
	// RequestUnpause ends the pool's earlier Pause requests.
	RequestUnpause RequestAction = "Unpause"
)

// RequestPhase is where a GPUPoolRequest is in its life.
// +kubebuilder:validation:Enum=Active;Completed;Expired;Superseded;Invalid
type RequestPhase string

const (
	// RequestActive: a Switch or Pause request is in force.
	RequestActive RequestPhase = "Active"
	// RequestCompleted: a Resume or Unpause request ended the requests it ends. Final.
	RequestCompleted RequestPhase = "Completed"
	// RequestExpired: a Switch or Pause request reached its expiry. Final.
	RequestExpired RequestPhase = "Expired"
	// RequestSuperseded: a later request of the pool ended it (a Switch or Resume
	// ends an earlier Switch, an Unpause ends an earlier Pause). Final.
	RequestSuperseded RequestPhase = "Superseded"
	// RequestInvalid: the pool has no layout spec.layout. Checked again on every pass
	// of the pool until the request expires: a layout added to the pool makes it Active.
	RequestInvalid RequestPhase = "Invalid"
)

// DefaultRequestDuration is how long a Switch or Pause request without until or
// duration lasts from its creation: a working day, so that a forgotten request does not
// hold the pool past the next day's schedule.
const DefaultRequestDuration = 8 * time.Hour

// GPUPoolRequestSpec is a person's request to a pool: switch it, or pause it, for a
// while. It is immutable: create another request (a later one supersedes it) or delete it.
//
// +kubebuilder:validation:XValidation:rule=`self.action != 'Switch' || has(self.layout)`,message=`spec.layout is required for action Switch: name the layout to switch to, one of the pool's spec.layouts[].name`
// +kubebuilder:validation:XValidation:rule=`self.action == 'Switch' || !has(self.layout)`,message=`spec.layout is only read for action Switch: remove it, or write action: Switch`,messageExpression=`'spec.layout is only read for action Switch, not ' + self.action + ': remove it, or write action: Switch'`
// +kubebuilder:validation:XValidation:rule=`!(has(self.until) && has(self.duration))`,message=`set spec.until or spec.duration, not both: until is a time (RFC 3339), duration is counted from the request's creation`
// +kubebuilder:validation:XValidation:rule=`self.action in ['Switch', 'Pause'] || (!has(self.until) && !has(self.duration))`,message=`spec.until and spec.duration are only read for actions Switch and Pause: a Resume or Unpause takes effect once; remove them`,messageExpression=`'spec.until and spec.duration are only read for actions Switch and Pause, not ' + self.action + ': a Resume or Unpause takes effect once; remove them'`
type GPUPoolRequestSpec struct {
	// Pool is the name of the GPUPoolProfile the request is for.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Pool string `json:"pool"`

	// Action is Switch (force a layout), Resume (end the pool's earlier Switch
	// requests), Pause (pause the pool) or Unpause (end the pool's earlier Pause
	// requests).
	Action RequestAction `json:"action"`

	// Layout is the layout to switch to (Switch only).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Layout string `json:"layout,omitempty"`

	// Until is when a Switch or Pause request expires (RFC 3339).
	// +optional
	Until *metav1.Time `json:"until,omitempty"`

	// Duration is how long a Switch or Pause request lasts from its creation, such as
	// 2h. Without until or duration it lasts 8h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(h|m|s)){1,3}$') && duration(self) > duration('0s')`,message=`spec.duration must be a positive duration such as 2h, 90m or 1h30m (units h, m, s; write 24h for a day)`,messageExpression=`'spec.duration must be a positive duration such as 2h, 90m or 1h30m (units h, m, s; write 24h for a day), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self)`
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`

	// Reason is shown in the pool's status and events, and in the request's.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
}

// GPUPoolRequestStatus is what the pool's controller made of the request.
type GPUPoolRequestStatus struct {
	// Phase is Active, Completed, Expired, Superseded or Invalid; empty until the
	// pool's controller has seen the request (the pool does not exist, or not yet).
	// +optional
	Phase RequestPhase `json:"phase,omitempty"`
	// Message says why, naming the superseding request or the layouts that exist.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// ExpiresAt is when a Switch or Pause request expires: until, or startTime plus
	// duration or 8h, on gpupool's clock.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// StartTime is when gpupool first took the request into account (on its own clock,
	// not the API server's creationTimestamp): a duration counts from then.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// EndTime is when the request reached a final phase (Completed, Expired or
	// Superseded). The manager deletes it --request-retention (default 24h) later.
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
}

// GPUPoolRequest asks a pool to switch, resume, pause or unpause for a while, without
// writing the pool's spec: an object of its own, so that a GitOps tool that owns the
// pool's manifest does not revert it (docs/gitops.md). A live request beats the pool's
// spec.override and spec.paused; the newest Switch request wins.
//
// +kubebuilder:validation:XValidation:rule=`self.spec == oldSelf.spec`,message=`a GPUPoolRequest's spec cannot be changed: create a new request (a later Switch or Resume supersedes an earlier Switch, an Unpause an earlier Pause) or delete this one`
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gpr,categories=gpupool
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Layout",type=string,JSONPath=`.spec.layout`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUPoolRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUPoolRequestSpec   `json:"spec"`
	Status GPUPoolRequestStatus `json:"status,omitempty"`
}

// GPUPoolRequestList is a list of GPUPoolRequest.
//
// +kubebuilder:object:root=true
type GPUPoolRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUPoolRequest `json:"items"`
}
