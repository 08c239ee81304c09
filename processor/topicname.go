package processor

import "fmt"

// maxTopicNameLen is the longest topic name Kafka accepts (Topic.validate
// in Apache Kafka's clients: 249 bytes, so that a partition's directory
// name, topic-partition, fits a 255-byte file name).
const maxTopicNameLen = 249

// checkTopicName returns an error saying why name is not a legal Kafka
// topic name, or nil. The rule is Apache Kafka's (Topic.validate): 1 to 249
// characters of ASCII letters, digits, '.', '_' and '-', and neither "."
// nor "..". Checking it at construction turns what the broker would refuse
// at the first fetch or produce (INVALID_TOPIC_EXCEPTION) into an error
// naming the option.
func checkTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty")
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a legal topic name", name)
	case len(name) > maxTopicNameLen:
		return fmt.Errorf("%d characters, want at most %d", len(name), maxTopicNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%q has %q at byte %d: a topic name holds only ASCII letters, digits, '.', '_' and '-'", name, c, i+1)
		}
	}
	return nil
}
