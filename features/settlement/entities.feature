Feature: Topics, sequence numbers and entity descriptions

  @SETTLE-TOPIC-001 @needs:topics
  Scenario: Every subscription gets its own copy, settled independently
    Given a topic "t" with subscriptions "s1" and "s2"
    When message "m1" is sent to "t"
    And receiver "A" on "t/Subscriptions/s1" receives 1 message
    And receiver "A" completes "m1"
    And receiver "B" on "t/Subscriptions/s2" receives 1 message
    Then receiver "B" got "m1" with delivery count 1
    And peeking "t/Subscriptions/s1" shows nothing

  @SETTLE-SEQ-001
  Scenario: Sequence numbers are unique and increase in acceptance order
    Given a queue "q"
    When messages "m1", "m2", "m3" are sent to "q"
    Then peeking "q" shows "m1", "m2", "m3"
    And the sequence numbers of "m1", "m2", "m3" strictly increase

  @SETTLE-ENT-001
  Scenario: Default lock duration and max delivery count
    Given a queue "q"
    When message "m1" is sent to "q"
    And receiver "A" on "q" receives 1 message
    Then "m1" is locked until 60 seconds after it was received
    And receiver "A" abandons "m1"
    And receiver "A" receives and abandons "m1" 9 more times
    And receiver "A" receives 1 message
    And receiver "A" got no message
    And the dead-letter queue of "q" holds "m1" with reason "MaxDeliveryCountExceeded"

  @SETTLE-ENT-001
  Scenario Outline: Out-of-range descriptions are refused
    When a queue "bad" with <property> is created
    Then the operation fails with "argument-error"

    Examples:
      | property                  |
      | lock duration 301 seconds |
      | max delivery count 0      |
