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

  @SETTLE-ENT-001 @needs:broker-clock
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

  @SETTLE-TIER-001 @needs:entity-management @needs:standard-namespace
  Scenario: A Standard queue cannot be given a max message size above 256 KB
    When a queue "big" with max message size 102400 KB is created
    Then the operation fails with "argument-error"

  @SETTLE-TIER-001 @needs:standard-namespace
  Scenario: A 1 MB message, the Premium default, is refused on Standard
    Given a queue "q"
    When message "huge" with a body of 1000000 bytes is sent to "q"
    Then the operation fails with "message-size-exceeded"
    And peeking "q" shows nothing

  @SETTLE-TIER-004 @needs:entity-management @needs:standard-namespace
  Scenario: A Standard queue cannot be larger than 5 GB unless partitioned
    When a queue "six" with max size 6144 MB is created
    Then the operation fails with "argument-error"
    And a queue "five" with max size 5120 MB is created
    And the operation succeeds
    And a queue "odd" with max size 1500 MB is created
    And the operation fails with "argument-error"

  @SETTLE-SEND-008
  Scenario: A message id longer than 128 characters is refused
    Given a queue "q"
    When message "long" with a message id of 129 characters is sent to "q"
    Then the operation fails with "argument-error", or with "invalid-operation" when the client refuses it first
    And message "ok" with a message id of 128 characters is sent to "q"
    And the operation succeeds

  @SETTLE-FWD-001 @needs:entity-management @needs:auto-forward
  Scenario: Auto-forwarding needs an existing destination, on creation and on update
    Given a queue "dst"
    When a queue "src" forwarding to the missing entity "nowhere" is created
    Then the operation fails with "entity-not-found"
    And a queue "late"
    And "late" is updated to forward to the missing entity "nowhere"
    And the operation fails with "entity-not-found"
    And "late" is updated to forward to "dst"
    And message "m1" is sent to "late"
    And peeking "dst" shows "m1"
    And peeking "late" shows nothing, or is refused

  @SETTLE-FWD-001 @needs:entity-management @needs:auto-forward @needs:sessions
  Scenario: A queue that requires sessions cannot auto-forward
    Given a queue "dst" with sessions
    And a queue "sq" with sessions
    When "sq" is updated to forward to "dst"
    Then the operation is refused
    And message "m1" with session "a" is sent to "sq"
    And peeking "sq" shows "m1"

  @SETTLE-FWD-003 @needs:entity-management @needs:auto-forward
  Scenario: A queue that auto-forwards refuses receivers; its dead-letter subqueue does not
    Given a queue "dst"
    And a queue "src"
    When "src" is updated to forward to "dst"
    And message "m1" is sent to "src"
    And receiver "A" on "src" receives 1 message
    Then the operation is refused
    And receiver "B" on "src/$DeadLetterQueue" receives 1 message
    And receiver "B" got no message
    And receiver "C" on "dst" receives 1 message
    And receiver "C" got "m1"

  @SETTLE-ENT-002 @needs:entity-management
  Scenario: An entity name with a character Service Bus does not allow is refused
    When a queue named "no spaces" is created
    Then the operation is refused
    And a queue named "dots.dashes-and_underscores" is created
    And the operation succeeds

  @SETTLE-TIER-003 @needs:basic-namespace @needs:model-internals
  Scenario: A Basic namespace has queues only
    Given a Basic namespace
    When a topic "t" with default time to live 60 seconds is created
    Then the operation fails with "invalid-operation"
    And a queue "sq" with sessions is created
    And the operation fails with "invalid-operation"
    And a queue "dq" with duplicate detection window 60 seconds is created
    And the operation fails with "invalid-operation"
    And a queue "idle" with auto-delete on idle 10 minutes is created
    And the operation fails with "invalid-operation"
    And a queue "q" with lock duration 30 seconds is created
    And the operation succeeds

  @SETTLE-ENT-002 @needs:entity-management
  Scenario: Auto-delete on idle is at least 5 minutes
    When a queue "short" with auto-delete on idle 4 minutes is created
    Then the operation fails with "argument-error"
    And a queue "five" with auto-delete on idle 5 minutes is created
    And the operation succeeds

  @SETTLE-ENT-002 @needs:entity-management @needs:topics
  Scenario: Entity paths and subscription names stay within their lengths
    Given a topic "t" with subscriptions "s1"
    When a queue with a name of 261 characters is created
    Then the operation fails with "argument-error"
    And a subscription with a name of 51 characters is created on "t"
    And the operation fails with "argument-error"
    And a subscription with a name of 50 characters is created on "t"
    And the operation succeeds

  @SETTLE-ENT-003 @needs:entity-management @needs:topics
  Scenario: A topic has no lock duration or max delivery count; its subscriptions do
    When a topic "t" with lock duration 5 seconds is created
    Then the operation fails with "argument-error"
    And a topic "t" with max delivery count 3 is created
    And the operation fails with "argument-error"
    And a topic "t" with default time to live 60 seconds is created
    And the operation succeeds

  @SETTLE-STATUS-001 @SETTLE-STATUS-003 @needs:entity-management
  Scenario: A queue whose sends are disabled refuses sends, keeps its messages and still delivers them
    Given a queue "q"
    And message "m1" is sent to "q"
    When "q" is updated with status SendDisabled
    And message "m2" is sent to "q"
    Then the operation fails with "entity-unavailable"
    And receiver "R" on "q" receives 1 message
    And receiver "R" got "m1"
    When "q" is updated with status Active
    And message "m3" is sent to "q"
    Then the operation succeeds
    And peeking "q" shows "m1", "m3"

  @SETTLE-STATUS-002 @SETTLE-STATUS-003 @needs:entity-management
  Scenario: A queue whose receives are disabled takes sends and keeps every message, but gives none out
    Given a queue "q"
    And message "m1" is sent to "q"
    When "q" is updated with status ReceiveDisabled
    And message "m2" is sent to "q"
    Then the operation succeeds
    When receiver "R" on "q" receives 1 message
    Then the operation fails with "entity-unavailable"
    When "q" is updated with status Active
    And receiver "S" on "q" receives 2 messages
    Then receiver "S" got "m1", "m2"

  @SETTLE-STATUS-001 @SETTLE-STATUS-002 @needs:entity-management
  Scenario: A disabled queue refuses both sends and receives
    Given a queue "q" with status Disabled
    When message "m1" is sent to "q"
    Then the operation fails with "entity-unavailable"
    When receiver "R" on "q" receives 1 message
    Then the operation fails with "entity-unavailable"

  @SETTLE-STATUS-002 @needs:entity-management @needs:topics
  Scenario: A topic copies messages into a disabled subscription, which gives none out until it is active again
    Given a topic "t" with subscriptions "s1" and "s2"
    When "t/Subscriptions/s2" is updated with status Disabled
    And message "m1" is sent to "t"
    Then the operation succeeds
    When receiver "A" on "t/Subscriptions/s2" receives 1 message
    Then the operation fails with "entity-unavailable"
    And receiver "B" on "t/Subscriptions/s1" receives 1 message
    And receiver "B" got "m1"
    When "t/Subscriptions/s2" is updated with status Active
    And receiver "C" on "t/Subscriptions/s2" receives 1 message
    Then receiver "C" got "m1"
