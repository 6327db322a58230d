package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Condition reasons. Each decision returns a reason and a message that become the
// condition's text unchanged.
const (
	ReasonLayoutActive       = "LayoutActive"
	ReasonTransitioning      = "Transitioning"
	ReasonRepairing          = "Repairing"
	ReasonIdle               = "Idle"
	ReasonDrainBlocked       = "DrainBlocked"
	ReasonDrainAborted       = "DrainAborted"
	ReasonNodeNotReady       = "NodeNotReady"
	ReasonTaskFailed         = "VSphereTaskFailed"
	ReasonInfeasible         = "LayoutInfeasible"
	ReasonVCenterUnavailable = "VCenterUnavailable"
	ReasonCredentials        = "CredentialsUnavailable"
	ReasonInvalidSpec        = "InvalidSpec"
	ReasonPaused             = "Paused"
	ReasonNotPaused          = "NotPaused"
	ReasonAsExpected         = "AsExpected"
)

func setCondition(p *gpupoolv1.GPUPoolProfile, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: p.Generation,
	})
}

func condTrue(p *gpupoolv1.GPUPoolProfile, typ, reason, msg string) {
	setCondition(p, typ, metav1.ConditionTrue, reason, msg)
}

func condFalse(p *gpupoolv1.GPUPoolProfile, typ, reason, msg string) {
	setCondition(p, typ, metav1.ConditionFalse, reason, msg)
}

// workerStatus returns the status entry of a VM, adding it when missing.
func workerStatus(p *gpupoolv1.GPUPoolProfile, vm string) *gpupoolv1.WorkerStatus {
	for i := range p.Status.Workers {
		if p.Status.Workers[i].VM == vm {
			return &p.Status.Workers[i]
		}
	}
	p.Status.Workers = append(p.Status.Workers, gpupoolv1.WorkerStatus{VM: vm})
	return &p.Status.Workers[len(p.Status.Workers)-1]
}
