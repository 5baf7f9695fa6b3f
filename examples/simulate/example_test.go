package main

import "os"

// Replaying a generated heavy-churn trace of 300 arrivals on two A30s
// prints the three policies side by side.
func Example() {
	args := []string{"-model", "A30", "-gpus", "2", "-profiles", "plain", "-arrivals", "300", "-seed", "7"}
	if err := run(args, nil, os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// 2 x NVIDIA A30, profiles 1g.6gb 2g.12gb 4g.24gb
	// trace generated: skewed mix, seed 7, 300 arrivals, load 1.30, mean life 20
	//
	//       policy  arrivals  accepted  rej capacity  rej fragmentation  rej no-profile  rej other  mean slot util
	//    first-fit       300       225            70                  5               0          0           67.6%
	//        v2.10       300       227            67                  6               0          0           67.0%
	//   frag-aware       300       219            79                  2               0          0           67.9%
}
