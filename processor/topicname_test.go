package processor

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A topic name Kafka would refuse (Topic.validate: 1-249 characters of
// ASCII letters, digits, '.', '_', '-', not "." or "..") is refused by New,
// naming the option, for a source topic, the DLQ, the retry topics and the
// DLQ name a group gives by default; legal names of every kind pass.
func TestTopicNamesCheckedAtNew(t *testing.T) {
	nop := func(context.Context, *kgo.Record) error { return nil }
	base := func(group string, topics ...string) []Opt {
		return []Opt{Brokers("127.0.0.1:1"), Group(group), Topics(topics...), WithHandler(nop)}
	}
	for _, c := range []struct {
		name string
		opts []Opt
		want string // "" when valid
	}{
		{"legal names", append(base("billing-v2", "in.v_1-A", "b"), RetryTopics(1), DeadLetterTopic("dead.letters_1")), ""},
		{"249 characters", base("g", strings.Repeat("a", 249)), ""},
		{"slash", base("g", "bad/topic"), `Topics: topic 1 of 1: "bad/topic" has '/' at byte 4`},
		{"space", base("g", "ok", "has space"), "Topics: topic 2 of 2:"},
		{"non-ASCII", base("g", "commandé"), "Topics: topic 1 of 1:"},
		{"dot", base("g", "."), `Topics: topic 1 of 1: "." is not a legal topic name`},
		{"dot dot", base("g", ".."), "Topics: topic 1 of 1:"},
		{"250 characters", base("g", strings.Repeat("a", 250)), "Topics: topic 1 of 1: 250 characters, want at most 249"},
		{"DLQ", append(base("g", "in"), DeadLetterTopic("dead:letters")), "DeadLetterTopic: "},
		{"retry prefix", append(base("g", "in"), RetryTopics(1), RetryTopicPrefix("retry#")), "RetryTopics: retry topic name from the prefix"},
		{"group with a space: default DLQ", base("my group", "in"), "Group: the default DLQ topic"},
		{"group with a space: DLQ set", append(base("my group", "in"), DeadLetterTopic("my-group.dlq")), ""},
		{"group with a space: retry topics", append(base("my group", "in"), RetryTopics(1), DeadLetterTopic("d")), "RetryTopics: retry topic name from the prefix"},
	} {
		p, err := New(c.opts...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
		if p != nil {
			p.cl.Close()
			p.prod.Close()
		}
	}
}
