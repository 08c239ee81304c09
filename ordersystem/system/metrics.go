package system

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordercast/ordercast/outbox"
)

// registerMetrics exposes the outbox relay's and the exactly-once members'
// counters on the system's registry:
//
//	ordercast_outbox_rows_published_total     rows published and marked by this process's relay
//	ordercast_outbox_transactions_total{result="committed|aborted"}
//	ordercast_outbox_rows_recovered_total     rows marked from the progress marker after a crash
//	ordercast_outbox_fenced_total             times this relay was fenced by another one
//	ordercast_outbox_step_seconds_total{phase="load|produce|commit|confirm|mark"}
//	ordercast_txn_transactions_total{group,result="committed|aborted"}
func (s *System) registerMetrics() {
	reg := s.cfg.Metrics
	if r := s.Relay; r != nil {
		cf := func(name, help string, labels prometheus.Labels, f func() int64) {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
				func() float64 { return float64(f()) }))
		}
		cf("ordercast_outbox_rows_published_total", "Outbox rows this process's relay published and marked sent.", nil,
			func() int64 { return r.Stats().Published })
		cf("ordercast_outbox_transactions_total", "Outbox relay transactions, by result.", prometheus.Labels{"result": "committed"},
			func() int64 { return r.Stats().Transactions })
		cf("ordercast_outbox_transactions_total", "Outbox relay transactions, by result.", prometheus.Labels{"result": "aborted"},
			func() int64 { return r.Stats().Aborted })
		cf("ordercast_outbox_rows_recovered_total", "Outbox rows marked sent from the Kafka progress marker: committed by a relay that stopped before marking them (duplicates avoided).", nil,
			func() int64 { return r.Stats().Recovered })
		cf("ordercast_outbox_fenced_total", "Times this process's relay was fenced by another relay with the same transactional id.", nil,
			func() int64 { return r.Stats().Fenced })
		for phase, f := range map[string]func(outbox.Stats) time.Duration{
			"load":    func(s outbox.Stats) time.Duration { return s.LoadTime },
			"produce": func(s outbox.Stats) time.Duration { return s.ProduceTime },
			"commit":  func(s outbox.Stats) time.Duration { return s.CommitTime },
			"confirm": func(s outbox.Stats) time.Duration { return s.ConfirmTime },
			"mark":    func(s outbox.Stats) time.Duration { return s.MarkTime },
		} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ordercast_outbox_step_seconds_total",
				Help: "Seconds the exactly-once outbox relay spent in each phase of its transactions (mark overlaps the next transaction).", ConstLabels: prometheus.Labels{"phase": phase}},
				func() float64 { return f(r.Stats()).Seconds() }))
		}
	}
	if len(s.txns) > 0 {
		txns := s.txns
		sum := func(committed bool) float64 {
			n := 0
			for _, t := range txns {
				c, a := t.Stats()
				if committed {
					n += c
				} else {
					n += a
				}
			}
			return float64(n)
		}
		group := txns[0].Health().Group
		for _, res := range []string{"committed", "aborted"} {
			committed := res == "committed"
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ordercast_txn_transactions_total",
				Help: "Transactions of the exactly-once members, by result.", ConstLabels: prometheus.Labels{"group": group, "result": res}},
				func() float64 { return sum(committed) }))
		}
	}
}
