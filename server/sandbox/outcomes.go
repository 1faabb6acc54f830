package sandbox

import "sync/atomic"

// outcomeCounts counts finished runs by outcome, process-wide, for the
// host's metrics (aep_sandbox_outcomes_total, docs/operating.md): a run
// ends in one place (wait), so counting there sees every run of every
// plugin, proc and skills alike, with one atomic add.
var outcomeCounts [len(countedOutcomes)]atomic.Uint64

// countedOutcomes are the outcomes a finished run can have.
var countedOutcomes = [...]Outcome{Timeout, OutOfMemory, Signaled, Crashed, Exited}

func countOutcome(o Outcome) {
	for i, c := range countedOutcomes {
		if c == o {
			outcomeCounts[i].Add(1)
			return
		}
	}
}

// OutcomeCounts returns how many runs ended with each outcome since the
// process started.
func OutcomeCounts() map[Outcome]uint64 {
	out := make(map[Outcome]uint64, len(countedOutcomes))
	for i, c := range countedOutcomes {
		out[c] = outcomeCounts[i].Load()
	}
	return out
}
