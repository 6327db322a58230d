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
