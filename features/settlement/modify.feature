@needs:settle-with-properties
Feature: Settling with properties to modify

  Background:
    Given a queue "q" with lock duration 5 seconds

  @SETTLE-MOD-001
  Scenario: Abandon, defer and dead-letter set the properties to modify on the message
    Given message "m" with properties "stage" = "new" and "kind" = "order" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" abandons "m" setting property "stage" = "retried"
    And receiver "A" receives 1 message
    Then receiver "A" holds "m" with property "stage" = "retried" and property "kind" = "order"
    When receiver "A" defers "m" setting properties "stage" = "deferred" and "attempt" = 2
    And receiver "A" receives the deferred message "m"
    Then receiver "A" holds "m" with property "stage" = "deferred" and property "attempt" = 2 and property "kind" = "order"
    When receiver "A" dead-letters "m" setting property "stage" = "dead"
    Then the copy of "m" in "q/$DeadLetterQueue" without a rule name has property "stage" = "dead" and property "attempt" = 2 and property "kind" = "order"
    And peeking "q" shows nothing
