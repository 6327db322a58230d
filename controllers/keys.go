package controllers

import gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"

// Short names, inside this package, for the keys and node state values defined (and
// documented: who sets each, who reads it) in api/v1alpha1/keys.go. They are aliases,
// not definitions: each key is spelled once, there.
const (
	LabelPool      = gpupoolv1.LabelPool
	LabelLayout    = gpupoolv1.LabelLayout
	LabelProfile   = gpupoolv1.LabelProfile
	LabelMemoryMiB = gpupoolv1.LabelMemoryMiB
	LabelParked    = gpupoolv1.LabelParked
	LabelState     = gpupoolv1.LabelState

	TaintParked       = gpupoolv1.TaintParked
	TaintDrainingSoon = gpupoolv1.TaintDrainingSoon

	AnnotationCordoned      = gpupoolv1.AnnotationCordoned
	AnnotationManagedLabels = gpupoolv1.AnnotationManagedLabels
	AnnotationManagedTaints = gpupoolv1.AnnotationManagedTaints
	AnnotationDrainAt       = gpupoolv1.AnnotationDrainAt
	AnnotationMarkedBy      = gpupoolv1.AnnotationMarkedBy
	AnnotationDoNotDisrupt  = gpupoolv1.AnnotationDoNotDisrupt
	annotationAddedCAPI     = gpupoolv1.AnnotationAddedCAPI

	FinalizerName = gpupoolv1.FinalizerName
)

// Values of LabelState.
const (
	StatePending       = gpupoolv1.StatePending
	StateDraining      = gpupoolv1.StateDraining
	StateParked        = gpupoolv1.StateParked
	StateReconfiguring = gpupoolv1.StateReconfiguring
	StateReady         = gpupoolv1.StateReady
	StateFailed        = gpupoolv1.StateFailed
)
