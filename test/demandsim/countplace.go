package demandsim

import "slices"

// Where the count model's inference pods run, GPU by GPU. Each unconverted physical GPU
// carries perPhys nodes of day's profile, one inference pod each at most. The scheduler
// places a new pod on a free node picked at random (kube-scheduler breaks ties between
// equally scored nodes at random, and empty nodes of one profile score alike), and a
// scale-down removes a pod picked at random. Converting GPUs takes the ones whose
// conversion evicts fewest pods (what the planner's least-cost choice does,
// internal/plan/convertchoice.go), name order breaking ties.

// gpuState is one physical GPU: the inference pods on its nodes; conv, converted in the
// layout the pool has or is switching to; act, converted in the layout it has.
type gpuState struct {
	pods      int
	conv, act bool
}

// pickable are the GPUs a step up may convert: those the target layout leaves to
// inference.
func (s *countSim) pickable() []int {
	var out []int
	for i, g := range s.gpus {
		if !g.conv {
			out = append(out, i)
		}
	}
	return out
}

// convertTo makes n GPUs the converted ones of the target layout and returns the
// inference pods it evicted: a step up converts the pickable GPUs with fewest pods, a
// step down gives back converted GPUs (the training jobs are packed: RunCount's
// released). Both keep the target's converted GPUs and the active layout's nested (one
// set holds the other), as the planner does by keeping what is already converted: a
// step up takes, among GPUs with as few pods, the ones the active layout has converted
// (empty, offline for inference) first, and a step down gives back the ones only the
// target converts first; name order breaks the remaining ties.
func (s *countSim) convertTo(n int) int {
	var conv []int
	for i, g := range s.gpus {
		if g.conv {
			conv = append(conv, i)
		}
	}
	k := len(conv)
	evicted := 0
	if n > k {
		pick := s.pickable()
		slices.SortStableFunc(pick, func(a, b int) int {
			if d := s.gpus[a].pods - s.gpus[b].pods; d != 0 {
				return d
			}
			return actFirst(s.gpus[a].act, s.gpus[b].act)
		})
		for _, g := range pick[:n-k] {
			evicted += s.gpus[g].pods
			s.gpus[g].pods, s.gpus[g].conv = 0, true
		}
	}
	if k > n {
		// The ones the active layout lacks first; among them, last in name order first.
		slices.Reverse(conv)
		slices.SortStableFunc(conv, func(a, b int) int { return -actFirst(s.gpus[a].act, s.gpus[b].act) })
		for _, g := range conv[:k-n] {
			s.gpus[g].conv = false
		}
	}
	return evicted
}

// actFirst orders a GPU the active layout has converted before one it has not.
func actFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// nested says whether the target's converted GPUs and the active layout's are nested
// (one set holds the other): what capacity's counts assume.
func (s *countSim) nested() bool {
	var convOnly, actOnly bool
	for _, g := range s.gpus {
		convOnly = convOnly || (g.conv && !g.act)
		actOnly = actOnly || (g.act && !g.conv)
	}
	return !convOnly || !actOnly
}

// settle ends a transition: the target's converted GPUs are the active ones.
func (s *countSim) settle() {
	for i := range s.gpus {
		s.gpus[i].act = s.gpus[i].conv
	}
}

// place runs inf inference pods as far as the GPUs serving inference (converted in
// neither the active nor the target layout) have nodes: new pods on random free nodes,
// a scale-down from random pods. It returns the pods running.
func (s *countSim) place(inf int) int {
	var free, running int
	for _, g := range s.serving() {
		free += s.perPhys - s.gpus[g].pods
		running += s.gpus[g].pods
	}
	for ; running < inf && free > 0; running, free = running+1, free-1 {
		s.gpus[s.nth(s.rng.Intn(free), func(g gpuState) int { return s.perPhys - g.pods })].pods++
	}
	for ; running > inf; running-- {
		s.gpus[s.nth(s.rng.Intn(running), func(g gpuState) int { return g.pods })].pods--
	}
	return running
}

// serving are the GPUs serving inference: converted in neither the active nor the
// target layout.
func (s *countSim) serving() []int {
	var out []int
	for i, g := range s.gpus {
		if !g.conv && !g.act {
			out = append(out, i)
		}
	}
	return out
}

// nth is the serving GPU that holds the i-th of the slots weight counts per GPU.
func (s *countSim) nth(i int, weight func(gpuState) int) int {
	for g, st := range s.gpus {
		if st.conv || st.act {
			continue
		}
		if i < weight(st) {
			return g
		}
		i -= weight(st)
	}
	panic("demandsim: no GPU holds the slot")
}
