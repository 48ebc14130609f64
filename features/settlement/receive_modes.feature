Feature: Receive modes
  Receive-and-delete settles on delivery; peek-lock hands the message over under a lock.

  Background:
    Given a queue "q" with lock duration 5 seconds

  @SETTLE-RECV-001 @needs:drop-connection
  Scenario: Receive-and-delete consumes the message even if the receiver is lost
    Given messages "m1", "m2" are sent to "q"
    And receiver "R" on "q" in receive-and-delete mode
    When receiver "R" receives 1 message
    And the connection of receiver "R" drops
    And 10 seconds pass
    And receiver "B" on "q" receives 5 messages
    Then receiver "R" got "m1"
    And receiver "B" got "m2"

  @SETTLE-RECV-003
  Scenario: A message received and deleted carries no lock to settle
    Given message "m1" is sent to "q"
    And receiver "R" on "q" in receive-and-delete mode
    When receiver "R" receives 1 message
    And receiver "R" completes "m1"
    Then the operation fails with "invalid-operation"

  @SETTLE-RECV-002 @SETTLE-SEQ-001
  Scenario: Messages are received in the order they were accepted
    Given messages "m1", "m2", "m3", "m4" are sent to "q"
    When receiver "A" on "q" receives 4 messages
    Then receiver "A" got "m1", "m2", "m3", "m4"
    And the sequence numbers of "m1", "m2", "m3", "m4" strictly increase
