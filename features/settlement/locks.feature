Feature: Peek-lock locks
  A peek-locked message is invisible to other receives until it is settled, its lock is
  renewed past the lock duration, its receiver loses its connection, or the lock duration
  passes. The lock belongs to the entity: any receiver of it may settle or renew the lock
  by its token (SETTLE-LOCK-011).

  Background:
    Given a queue "q" with lock duration 5 seconds and max delivery count 3

  @SETTLE-LOCK-001 @SETTLE-LOCK-003
  Scenario: A locked message is invisible to a competing receiver, which gets the next one
    Given messages "m1", "m2" are sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "B" on "q" receives 5 messages
    Then receiver "A" got "m1"
    And receiver "B" got "m2"

  @SETTLE-LOCK-001
  Scenario: While the only message is locked, a competing receiver gets nothing
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "B" on "q" receives 1 message
    Then receiver "B" got no message

  @SETTLE-LOCK-002 @needs:broker-clock
  Scenario: The lock lasts the entity's lock duration
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    Then "m1" is locked until 5 seconds after it was received
    When 6 seconds pass
    And receiver "B" on "q" receives 1 message within 1 second
    Then receiver "B" got "m1"

  @SETTLE-LOCK-004 @needs:broker-clock
  Scenario: The holder renews the lock, counted from the renewal
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And 3 seconds pass
    And receiver "A" renews the lock on "m1"
    Then "m1" is locked until 5 seconds after the renewal
    And 3 seconds pass
    And receiver "A" completes "m1"
    And the operation succeeds

  @SETTLE-LOCK-005 @SETTLE-LOCK-010 @SETTLE-DUP-001
  Scenario: An expired lock makes the message available again, counted as a delivery
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And 6 seconds pass
    And receiver "B" on "q" receives 1 message
    Then receiver "A" got "m1" with delivery count 1
    And receiver "B" got "m1" with delivery count 2

  @SETTLE-LOCK-006
  Scenario: A released message goes back to the front, before newer messages
    Given messages "m1", "m2", "m3" are sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" abandons "m1"
    And message "m4" is sent to "q"
    And receiver "A" receives 4 messages
    Then receiver "A" got "m1", "m2", "m3", "m4"

  @SETTLE-LOCK-007
  Scenario: Past the max delivery count the message is dead-lettered
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives and abandons "m1" 3 times
    And receiver "A" receives 1 message
    Then receiver "A" got no message
    And the dead-letter queue of "q" holds "m1" with reason "MaxDeliveryCountExceeded"

  @SETTLE-LOCK-008
  Scenario Outline: Settling or renewing an expired lock fails with message-lock-lost
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And 6 seconds pass
    And receiver "A" <operation> "m1"
    Then the operation fails with "message-lock-lost"

    Examples:
      | operation            |
      | completes            |
      | dead-letters         |
      | renews the lock on   |
      | abandons             |
      | defers               |

  @SETTLE-LOCK-009 @needs:drop-connection
  Scenario: A dropped connection loses its locks
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And the connection of receiver "A" drops
    And receiver "A" completes "m1"
    Then the operation fails with "message-lock-lost"
    And receiver "B" on "q" receives 1 message within 6 seconds
    And receiver "B" got "m1"

  @SETTLE-LOCK-010 @SETTLE-PEEK-001
  Scenario: The delivery count starts at 1, grows with each abandon, and peeking leaves it alone
    Given message "m1" is sent to "q"
    When peeking "q" shows "m1" with delivery count 1
    And receiver "A" on "q" receives 1 message
    And receiver "A" abandons "m1"
    And peeking "q" shows "m1" with delivery count 2
    And receiver "A" receives 1 message
    Then receiver "A" got "m1" with delivery count 2

  @SETTLE-LOCK-011
  Scenario: Another receiver of the entity completes a message by its lock token
    Given message "m1" is sent to "q"
    And receiver "B" on "q"
    When receiver "A" on "q" receives 1 message
    And receiver "B" completes the message "m1" that "A" holds
    Then the operation succeeds
    And peeking "q" shows nothing
    And receiver "A" completes "m1"
    And the operation fails with "message-lock-lost"

  @SETTLE-LOCK-011 @SETTLE-LOCK-010
  Scenario: Another receiver of the entity abandons a message by its lock token
    Given message "m1" is sent to "q"
    And receiver "B" on "q"
    When receiver "A" on "q" receives 1 message
    And receiver "B" abandons the message "m1" that "A" holds
    Then the operation succeeds
    And receiver "A" completes "m1"
    And the operation fails with "message-lock-lost"
    And receiver "B" receives 1 message
    And receiver "B" got "m1" with delivery count 2

  @SETTLE-LOCK-011
  Scenario: Another receiver of the entity defers a message by its lock token
    Given message "m1" is sent to "q"
    And receiver "B" on "q"
    When receiver "A" on "q" receives 1 message
    And receiver "B" defers the message "m1" that "A" holds
    Then the operation succeeds
    And peeking "q" shows "m1" in state "deferred"
    And receiver "A" completes "m1"
    And the operation fails with "message-lock-lost"

  @SETTLE-LOCK-011
  Scenario: Another receiver of the entity dead-letters a message by its lock token
    Given message "m1" is sent to "q"
    And receiver "B" on "q"
    When receiver "A" on "q" receives 1 message
    And receiver "B" dead-letters the message "m1" that "A" holds
    Then the operation succeeds
    And peeking "q" shows nothing
    And peeking "q/$DeadLetterQueue" shows "m1"
    And receiver "A" dead-letters "m1"
    And the operation fails with "message-lock-lost"

  @SETTLE-LOCK-011 @SETTLE-LOCK-004 @needs:broker-clock
  Scenario: Another receiver of the entity renews a lock by its token, and the holder settles it
    Given message "m1" is sent to "q"
    And receiver "B" on "q"
    When receiver "A" on "q" receives 1 message
    And 3 seconds pass
    And receiver "B" renews the lock on the message "m1" that "A" holds
    Then "m1" is locked until 5 seconds after the renewal
    And 3 seconds pass
    And receiver "A" completes "m1"
    And the operation succeeds
    And peeking "q" shows nothing

  @SETTLE-LOCK-011
  Scenario Outline: A lock token is unknown to another entity
    Given a queue "other"
    And message "m1" is sent to "q"
    And receiver "C" on "other"
    When receiver "A" on "q" receives 1 message
    And receiver "C" <operation> the message "m1" that "A" holds
    Then the operation fails with "message-lock-lost"
    And receiver "A" completes "m1"
    And the operation succeeds

    Examples:
      | operation            |
      | completes            |
      | abandons             |
      | defers               |
      | dead-letters         |
      | renews the lock on   |
