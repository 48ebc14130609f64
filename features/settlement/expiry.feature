@needs:time-to-live
Feature: Time to live and expiry

  @SETTLE-TTL-001
  Scenario: The entity default caps a message's time to live
    Given a queue "q" with default time to live 20 seconds
    When message "short" with time to live 10 seconds is sent to "q"
    And message "long" with time to live 60 seconds is sent to "q"
    And message "none" is sent to "q"
    Then peeking "q" shows "short" expiring 10 seconds after it was enqueued
    And peeking "q" shows "long" expiring 20 seconds after it was enqueued
    And receiver "A" on "q" receives 3 messages
    And receiver "A" got "none" expiring 20 seconds after it was enqueued

  @SETTLE-TTL-002
  Scenario: An expired message is not delivered
    Given a queue "q"
    When message "old" with time to live 5 seconds is sent to "q"
    And message "new" is sent to "q"
    And 6 seconds pass
    And receiver "A" on "q" receives 5 messages
    Then receiver "A" got "new"

  @SETTLE-TTL-003 @needs:dead-letter
  Scenario: With dead-lettering on expiration, expired messages go to the dead-letter subqueue
    Given a queue "q" with dead-lettering on expiration
    When message "old" with time to live 5 seconds is sent to "q"
    And 6 seconds pass
    And receiver "A" on "q" receives 1 message
    Then receiver "A" got no message
    And the dead-letter queue of "q" holds "old" with reason "TTLExpiredException"

  @SETTLE-TTL-004
  Scenario: A locked message can be completed after its expiry
    Given a queue "q" with lock duration 10 seconds
    When message "m1" with time to live 5 seconds is sent to "q"
    And receiver "A" on "q" receives 1 message
    And 7 seconds pass
    And receiver "A" completes "m1"
    Then the operation succeeds

  @SETTLE-TTL-004 @needs:dead-letter
  Scenario: A message abandoned after its expiry expires at once
    Given a queue "q" with lock duration 10 seconds and dead-lettering on expiration
    When message "m1" with time to live 5 seconds is sent to "q"
    And receiver "A" on "q" receives 1 message
    And 7 seconds pass
    And receiver "A" abandons "m1"
    And receiver "A" receives 1 message
    Then receiver "A" got no message
    And the dead-letter queue of "q" holds "m1" with reason "TTLExpiredException"
