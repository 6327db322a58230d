package demandsim

import (
	"math/rand"
	"slices"
	"testing"
)

// TestPlacementOverRandomOperations drives the count model's GPUs through random
// placements, conversions and settles, and checks after each what the scheduler and the
// planner it models guarantee: no GPU runs more pods than it has nodes, no pod runs on
// a converted or offline GPU, the pods running are as many as inference wants up to the
// serving nodes, and a conversion takes the GPUs fewest pods run on (it evicts the sum
// of the smallest counts) and leaves exactly the count asked converted.
func TestPlacementOverRandomOperations(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var picked, released int
	for world := range 200 {
		phys, per := 1+rng.Intn(6), 1+rng.Intn(5)
		s := &countSim{perPhys: per, gpus: make([]gpuState, phys), rng: rand.New(rand.NewSource(int64(world)))}
		for op := range 60 {
			switch rng.Intn(3) {
			case 0:
				inf := rng.Intn(phys*per + 3)
				got := s.place(inf)
				if want := min(inf, per*len(s.serving())); got != want {
					t.Fatalf("world %d op %d: place(%d) runs %d pods, want %d", world, op, inf, got, want)
				}
			case 1:
				n := rng.Intn(phys + 1)
				var counts []int
				k := 0
				for _, g := range s.gpus {
					if g.conv {
						k++
					} else {
						counts = append(counts, g.pods)
					}
				}
				slices.Sort(counts)
				want := 0
				if n > k {
					for _, c := range counts[:n-k] {
						want += c
					}
					picked++
				} else if n < k {
					released++
				}
				if got := s.convertTo(n); got != want {
					t.Fatalf("world %d op %d: converting %d -> %d GPUs evicted %d pods, the fewest are %d (pods %v)", world, op, k, n, got, want, counts)
				}
				conv := 0
				for _, g := range s.gpus {
					if g.conv {
						conv++
					}
				}
				if conv != n {
					t.Fatalf("world %d op %d: %d GPUs converted after convertTo(%d)", world, op, conv, n)
				}
			default:
				s.settle()
			}
			if !s.nested() {
				t.Fatalf("world %d op %d: converted GPUs of the target and the active layout not nested: %+v", world, op, s.gpus)
			}
			var conv, act int
			for _, g := range s.gpus {
				conv, act = conv+b2i(g.conv), act+b2i(g.act)
			}
			if got, want := len(s.serving()), phys-max(conv, act); got != want {
				t.Fatalf("world %d op %d: %d GPUs serve inference, the counts say %d: %+v", world, op, got, want, s.gpus)
			}
			for i, g := range s.gpus {
				if g.pods < 0 || g.pods > per || (g.pods > 0 && (g.conv || g.act)) {
					t.Fatalf("world %d op %d: GPU %d %+v with %d nodes a GPU", world, op, i, g, per)
				}
			}
		}
	}
	if picked < 100 || released < 100 {
		t.Fatalf("%d conversions up and %d down: the operations do not exercise the choice", picked, released)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSupersededStepKeepsTheConvertedGPU: night with one GPU converted is active, a
// switch to day is in flight, and night with one GPU comes back before it ends. The GPU
// converted again must be the one the active night has (empty, offline for inference),
// whatever its name order among the empty GPUs: another would take a GPU more offline
// than the counts say.
func TestSupersededStepKeepsTheConvertedGPU(t *testing.T) {
	for conv := range 4 {
		s := &countSim{perPhys: 2, gpus: make([]gpuState, 4), rng: rand.New(rand.NewSource(1))}
		s.gpus[conv] = gpuState{conv: true, act: true} // night(1) active on GPU conv
		s.convertTo(0)                                 // day in flight
		s.place(2)                                     // inference takes two pods on the other GPUs
		if got := s.convertTo(1); got != 0 {
			t.Fatalf("GPU %d: night(1) again evicted %d pods, the active GPU is empty", conv, got)
		}
		if !s.gpus[conv].conv || !s.nested() {
			t.Fatalf("GPU %d: night(1) again converted %+v, want GPU %d", conv, s.gpus, conv)
		}
	}
}

// TestPlaceSpreadsAtRandom: the scheduler the model stands for breaks ties between free
// nodes at random, so over seeds the first pod lands on every GPU, and a half-full pool
// is not packed onto its first GPUs.
func TestPlaceSpreadsAtRandom(t *testing.T) {
	const phys, per = 4, 4
	first := map[int]int{}
	packed := 0
	for seed := range 400 {
		s := &countSim{perPhys: per, gpus: make([]gpuState, phys), rng: rand.New(rand.NewSource(int64(seed)))}
		s.place(1)
		for i, g := range s.gpus {
			if g.pods == 1 {
				first[i]++
			}
		}
		s.place(phys * per / 2)
		if s.gpus[0].pods == per && s.gpus[1].pods == per {
			packed++
		}
	}
	for i := range phys {
		if first[i] < 50 {
			t.Fatalf("the first pod landed on GPU %d %d times in 400: %v", i, first[i], first)
		}
	}
	if packed > 40 {
		t.Fatalf("half the nodes filled the first two GPUs in %d of 400 seeds: placement packs", packed)
	}
}
