package outbox

import (
	"time"
)

// Stats are a relay's counters since it was created. Safe to read while
// Run runs.
type Stats struct {
	// Published counts rows published and marked sent by this relay.
	Published int64 `json:"published"`
	// Transactions counts committed transactions (exactly-once mode).
	Transactions int64 `json:"transactions"`
	// Aborted counts transactions aborted or whose commit outcome was
	// unknown (their rows are decided by the next session's marker read).
	Aborted int64 `json:"aborted"`
	// Recovered counts rows marked sent from the progress marker at the
	// start of a session: committed to Kafka by a relay that stopped
	// (crashed) before marking them. Each is a duplicate avoided.
	Recovered int64 `json:"recovered"`
	// Fenced counts the times another relay with the same transactional
	// id fenced this one (it then stands by).
	Fenced int64 `json:"fenced"`
	// Takeovers counts the times this relay left standby to take over.
	Takeovers int64 `json:"takeovers"`
	// MarkerMismatches counts markers whose rows did not match this
	// database (not trusted; those rows are published again).
	MarkerMismatches int64 `json:"markerMismatches"`
	// The time spent in each phase of the exactly-once relay's steps,
	// summed over the steps: reading the unsent rows (Load), producing
	// them and the marker until acknowledged (Produce), EndTxn (Commit),
	// reading the marker back read_committed (Confirm) and the UPDATE
	// that marks them sent (Mark, which overlaps the next step's other
	// phases). Divided by Transactions, the mean of one step.
	LoadTime    time.Duration `json:"loadTime"`
	ProduceTime time.Duration `json:"produceTime"`
	CommitTime  time.Duration `json:"commitTime"`
	ConfirmTime time.Duration `json:"confirmTime"`
	MarkTime    time.Duration `json:"markTime"`
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{
		Published:        r.stats.published.Load(),
		Transactions:     r.stats.transactions.Load(),
		Aborted:          r.stats.aborted.Load(),
		Recovered:        r.stats.recovered.Load(),
		Fenced:           r.stats.fenced.Load(),
		Takeovers:        r.stats.takeovers.Load(),
		MarkerMismatches: r.stats.mismatches.Load(),
		LoadTime:         time.Duration(r.stats.loadNs.Load()),
		ProduceTime:      time.Duration(r.stats.produceNs.Load()),
		CommitTime:       time.Duration(r.stats.commitNs.Load()),
		ConfirmTime:      time.Duration(r.stats.confirmNs.Load()),
		MarkTime:         time.Duration(r.stats.markNs.Load()),
	}
}
