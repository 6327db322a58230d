package v1alpha1

// LayoutNamed is the spec's layout of that name, nil when there is none (layout names
// are DNS labels, so "" names none).
func (s *GPUPoolProfileSpec) LayoutNamed(name string) *Layout {
	for i := range s.Layouts {
		if s.Layouts[i].Name == name {
			return &s.Layouts[i]
		}
	}
	return nil
}
