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
// step down gives back the converted GPUs last in name order (the training jobs are
// packed: RunCount's released).
func (s *countSim) convertTo(n int) int {
	k := 0
	for _, g := range s.gpus {
		if g.conv {
			k++
		}
	}
	evicted := 0
	if n > k {
		pick := s.pickable()
		slices.SortStableFunc(pick, func(a, b int) int { return s.gpus[a].pods - s.gpus[b].pods })
		for _, g := range pick[:n-k] {
			evicted += s.gpus[g].pods
			s.gpus[g].pods, s.gpus[g].conv = 0, true
		}
	}
	for i := len(s.gpus) - 1; i >= 0 && k > n; i-- {
		if s.gpus[i].conv {
			s.gpus[i].conv, k = false, k-1
		}
	}
	return evicted
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
